"""WorkerGroup: start a set of processes, watch them, and stop them all (no orphans): the one supervisor of
processes tfdist starts side by side (a launch's workers, a ``-H`` launch's hosts, a bench run's nodes)."""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass

from tfdist import variables
from tfdist.errors import SetupError
from tfdist.launcher.logs import LogSink, PipePump
from tfdist.launcher.plan import ProcessSpec

_PR_SET_PDEATHSIG = 1
#: Files the launcher holds per process (output pipe, log file, input pipe), and besides.
FILES_PER_PROCESS = 3
FILES_BESIDES = 64
#: Seconds between polls in :meth:`WorkerGroup.wait`.
WAIT_POLL_S = 0.1


def _child_setup(cpus: tuple[int, ...]) -> None:
    """Runs in the child before exec: die with the launcher, and bind to ``cpus`` (inherited by threads)."""
    with contextlib.suppress(
        OSError, AttributeError
    ):  # not Linux: the launcher's shutdown path still applies
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if cpus:
        os.sched_setaffinity(0, cpus)


@dataclass
class Worker:
    """One started process with where its output goes."""

    spec: ProcessSpec
    popen: subprocess.Popen[bytes]
    pump: LogSink

    @property
    def name(self) -> str:
        """The slot label (``w0``, ``chief``, ``ps1``)."""
        return self.spec.name

    def last_activity(self) -> float:
        """Monotonic time of the last output line or heartbeat-file update, whichever is later."""
        latest = self.pump.last_line_at
        heartbeat = variables.raw("TFDIST_HEARTBEAT_FILE", self.spec.env)
        if heartbeat:
            with contextlib.suppress(FileNotFoundError):
                latest = max(latest, time.monotonic() - (time.time() - os.stat(heartbeat).st_mtime))
        return latest


def _descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (children, theirs, ...), or [] when it is gone."""
    import psutil

    try:
        return [child.pid for child in psutil.Process(pid).children(recursive=True)]
    except psutil.Error:
        return []


def ensure_file_limit(processes: int) -> None:
    """Raise the soft limit on open files for ``processes``, or a SetupError before anything starts."""
    import resource

    needed = FILES_PER_PROCESS * processes + FILES_BESIDES
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or needed <= soft:
        return
    if hard != resource.RLIM_INFINITY and needed > hard:
        raise SetupError(
            f"{processes} processes need about {needed} open files in the launcher, but it may hold at most "
            f"{hard} (ulimit -Hn). Hint: raise the limit (limits.conf, or ulimit -n {needed} where allowed), "
            "or start fewer processes from one launcher."
        )
    resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))


class WorkerGroup:
    """The processes of one attempt. Each runs in its own session so a signal reaches its whole tree."""

    def __init__(self, specs: list[ProcessSpec], *, prefix: bool, console_names: set[str] | None) -> None:
        self.specs = specs
        self.prefix = prefix
        self.console_names = console_names  # None = every process on the console
        self.workers: list[Worker] = []
        self.pumps = PipePump()

    def start(self) -> None:
        """Start every process; their output is pumped to files and the console (:class:`PipePump`)."""
        ensure_file_limit(len(self.specs))
        for spec in self.specs:
            os.makedirs(os.path.dirname(spec.log_path), exist_ok=True)
            shown = self.console_names is None or spec.name in self.console_names
            # Quiet workers under an MPI launcher: its one pipe carries every rank; rank 0 is shown.
            quiet_mpi = self.console_names is not None and spec.name == "mpi"
            console = sys.stdout if shown or quiet_mpi else None
            sink = LogSink(spec.name, spec.log_path, console, self.prefix, "0" if quiet_mpi else None)
            if spec.console_prefix is not None:
                sink.prefix = spec.console_prefix
            sink.open()  # before the process: a log that cannot be written starts nothing
            try:
                popen = subprocess.Popen(
                    list(spec.argv),
                    env=spec.env,
                    stdin=subprocess.DEVNULL if spec.stdin is None else subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    preexec_fn=functools.partial(_child_setup, spec.cpus)
                    if sys.platform.startswith("linux")
                    else None,
                )
            except BaseException:
                sink.close()
                raise
            assert popen.stdout is not None
            self.pumps.add(sink, popen.stdout)
            if spec.stdin is not None and popen.stdin is not None:
                popen.stdin.write(spec.stdin)
                popen.stdin.flush()  # the pipe stays open: closing it is how such a process is told to stop
            self.workers.append(Worker(spec, popen, sink))

    def wait(self, deadline: float | None) -> tuple[Worker, int | None] | None:
        """Until every process exited 0 (None), one exited otherwise, or the deadline passed (code None)."""
        while True:
            exited = self.poll()
            failed = next(((w, code) for w, code in exited if code != 0), None)
            if failed is not None:
                return failed
            if len(exited) == len(self.workers):
                return None
            if deadline is not None and time.monotonic() >= deadline:
                return self.running()[0], None
            time.sleep(WAIT_POLL_S)

    def poll(self) -> list[tuple[Worker, int]]:
        """Processes that have exited since start, with their return codes (negative = signal)."""
        return [(w, code) for w in self.workers if (code := w.popen.poll()) is not None]

    def running(self) -> list[Worker]:
        """Processes still alive."""
        return [w for w in self.workers if w.popen.poll() is None]

    def mute(self, keep: Worker | None = None, at_traceback: bool = False) -> None:
        """Keep every worker's further output but ``keep``'s off the console (see :meth:`LogSink.mute`)."""
        for worker in self.workers:
            if worker is not keep:
                worker.pump.mute(at_traceback)

    def muted(self) -> str:
        """The workers whose output was kept off the console since :meth:`mute`: ``"w0 (25 lines)"``."""
        return ", ".join(
            f"{w.name} ({w.pump.muted} line{'s' if w.pump.muted != 1 else ''})"
            for w in self.workers
            if w.pump.muted
        )

    def send(self, signum: int) -> None:
        """Deliver ``signum`` to the process group of every live worker."""
        for worker in self.running():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(worker.popen.pid, signum)

    def close(self, grace: float) -> None:
        """Close every standard input, SIGTERM every process group, SIGKILL what is left after ``grace`` s."""
        for worker in self.workers:
            if worker.popen.stdin is not None and not worker.popen.stdin.closed:
                with contextlib.suppress(OSError):
                    worker.popen.stdin.close()
        self.send(signal.SIGTERM)
        deadline = time.monotonic() + grace
        while self.running() and time.monotonic() < deadline:
            time.sleep(0.05)
        self.kill()

    def kill(self) -> None:
        """SIGKILL every process group and every descendant of a live worker, and reap."""
        # An MPI launcher's ranks run in process groups of their own (Hydra's proxy makes them).
        strays = [pid for worker in self.running() for pid in _descendants(worker.popen.pid)]
        for worker in self.workers:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(worker.popen.pid, signal.SIGKILL)
        for pid in strays:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        for worker in self.workers:
            with contextlib.suppress(subprocess.TimeoutExpired):  # the kernel reaps SIGKILLed processes
                worker.popen.wait(timeout=10)
            worker.pump.join(timeout=5)
