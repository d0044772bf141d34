"""The launcher's side of workers that run on Ray nodes: the same WorkerGroup, read through the actors (a
thread per worker long-polls its actor for output, exit code and records)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

from tfdist import files
from tfdist.launcher.logs import LogPump
from tfdist.launcher.plan import ProcessSpec
from tfdist.launcher.workers import Worker, WorkerGroup
from tfdist.worker import boot_dir
from tfdist.worker.contract import AttemptFiles

#: Longest wait of one read on a worker's actor (the actor answers at once when there is output).
READ_WAIT_S = 0.5
#: Beyond the read's own wait: a node that answers nothing for this long counts as lost.
READ_SLACK_S = 60.0


class RemoteProcess:
    """What the supervisor reads from ``worker.popen``: pid, ``poll()``, ``wait()``, ``returncode``."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.stdin = None
        self.returncode: int | None = None
        self.lost: str | None = None  # why the worker's node or actor stopped answering

    def poll(self) -> int | None:
        """The exit code (negative: killed by that signal) once the node reported it, else None."""
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """Block until the node reports the exit code."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.returncode is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"ray worker pid {self.pid}", timeout or 0.0)
            time.sleep(0.05)
        return self.returncode


def mirror_record(directory: str, name: str, text: str) -> None:
    """Copy a worker's record into the launcher's attempt directory, atomically, unless it is there."""
    path = os.path.join(directory, name)
    if os.path.exists(path) and AttemptFiles.record_owner(name, "progress") is None:
        return
    os.makedirs(directory, exist_ok=True)
    files.write_text(path, text)


class RemoteStream:
    """A byte stream of one worker's output lines, fetched from its actor; updates its RemoteProcess."""

    def __init__(self, actor: Any, process: RemoteProcess, attempt_dir: str) -> None:
        self.actor, self.process, self.attempt_dir = actor, process, attempt_dir
        self.buffer: deque[bytes] = deque()
        self.eof = False
        self.heartbeat_at: float | None = None  # monotonic time of the worker's last heartbeat

    def readline(self) -> bytes:
        """The next line (with its newline), or ``b""`` once the process's output has ended."""
        while not self.buffer:
            if self.eof:
                return b""
            self._fetch()
        return self.buffer.popleft()

    def _fetch(self) -> None:
        import ray

        try:
            reply = ray.get(self.actor.read.remote(READ_WAIT_S), timeout=READ_WAIT_S + READ_SLACK_S)
        except Exception as exc:  # the actor or its node is gone (RayActorError, GetTimeoutError, ...)
            self.process.lost = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            self.buffer.append(f"tfdist launch: lost the worker's Ray node ({self.process.lost})\n".encode())
            self.eof = True
            self.process.returncode = -signal.SIGKILL
            return
        for name, text in reply["records"].items():
            mirror_record(self.attempt_dir, name, text)
        if reply["heartbeat_age"] is not None:
            self.heartbeat_at = time.monotonic() - float(reply["heartbeat_age"])
        self.buffer.extend(line.encode("utf-8") + b"\n" for line in reply["lines"])
        if reply["eof"]:
            self.eof = True
        if reply["code"] is not None:
            self.process.returncode = int(reply["code"])

    def close(self) -> None:
        """Nothing to release: the actor owns the pipe."""


@dataclass
class RayWorker(Worker):
    """A worker whose process runs on a Ray node."""

    stream: RemoteStream | None = None

    def last_activity(self) -> float:
        """The later of its last output line and its heartbeat, as its node reported them."""
        latest = self.pump.last_line_at
        if self.stream is not None and self.stream.heartbeat_at is not None:
            latest = max(latest, self.stream.heartbeat_at)
        return latest


class RayWorkerGroup(WorkerGroup):
    """The processes of one attempt, one per actor (bundle), started on the actors' nodes."""

    def __init__(
        self,
        specs: list[ProcessSpec],
        actors: Sequence[Any],
        *,
        prefix: bool,
        console_names: set[str] | None,
        launcher_python: str,
    ) -> None:
        super().__init__(specs, prefix=prefix, console_names=console_names)
        self.actors = list(actors)
        self.launcher_python = launcher_python

    def start(self) -> None:
        """Start every worker on its node; output flows to log files here and the console."""
        import ray

        cwd = os.getcwd()
        pids = ray.get(
            [
                actor.start.remote(list(spec.argv), spec.env, cwd, self.launcher_python, boot_dir())
                for spec, actor in zip(self.specs, self.actors, strict=True)
            ],
            timeout=120,
        )
        for spec, actor, pid in zip(self.specs, self.actors, pids, strict=True):
            os.makedirs(os.path.dirname(spec.log_path), exist_ok=True)
            process = RemoteProcess(int(pid))
            stream = RemoteStream(actor, process, os.path.dirname(spec.log_path))
            shown = self.console_names is None or spec.name in self.console_names
            pump = LogPump(
                spec.name, cast(Any, stream), spec.log_path, sys.stdout if shown else None, self.prefix
            )
            pump.start()
            popen = cast("subprocess.Popen[bytes]", process)  # duck-typed: pid, poll, wait, returncode
            self.workers.append(RayWorker(spec, popen, pump, stream))

    def send(self, signum: int) -> None:
        """Deliver ``signum`` to every live worker's process group, on its node."""
        for worker, actor in zip(self.workers, self.actors, strict=False):
            if worker.popen.poll() is None:
                actor.signal.remote(signum)

    def kill(self) -> None:
        """SIGKILL every worker on its node, then wait for their exit codes and last lines."""
        import ray

        with contextlib.suppress(Exception):  # a lost node: its stream has already ended the worker
            ray.get([actor.kill.remote() for actor in self.actors[: len(self.workers)]], timeout=30)
        for worker in self.workers:
            try:
                worker.popen.wait(timeout=10)
            except subprocess.TimeoutExpired:
                cast(RemoteProcess, worker.popen).returncode = -signal.SIGKILL
            worker.pump.join(timeout=5)
