"""One attempt of a launch, supervised until the workers all finish, one fails, another node fails, a worker
hangs, the run times out, a signal arrives, or the workers stop at a step boundary for the job to grow."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from types import FrameType

from tfdist import files, resize, variables
from tfdist.launcher import hang
from tfdist.launcher.assignment import Notice
from tfdist.launcher.config import LaunchConfig
from tfdist.launcher.console import console_print
from tfdist.launcher.join import JoinCheck
from tfdist.launcher.outcome import FailureInfo
from tfdist.launcher.policy import Outcome
from tfdist.launcher.records import error_record_time, read_error_record
from tfdist.launcher.workers import Worker, WorkerGroup
from tfdist.worker.contract import AttemptFiles

#: Seconds between polls of the workers (exit codes, heartbeats, the rendezvous).
POLL_S = 0.05
#: How long a local worker's failure waits for the rendezvous to say a node vanished at the same moment.
PEER_GONE_WINDOW_S = 0.5
#: Longest wait between SIGTERM and SIGKILL for workers the watchdog found hung.
HUNG_GRACE_S = 4.0
#: Seconds between hang checks (each reads the workers' progress records).
HANG_CHECK_S = 1.0


class Signals:
    """Counts SIGINT/SIGTERM received by the launcher; installed only from the main thread."""

    def __init__(self) -> None:
        self.count = 0
        self.signum = 0
        self._old: dict[int, object] = {}

    def _handler(self, signum: int, frame: FrameType | None) -> None:
        self.count += 1
        self.signum = self.signum or signum

    def install(self) -> None:
        """Count SIGINT and SIGTERM from now on (only the main thread may install handlers)."""
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._old[sig] = signal.signal(sig, self._handler)

    def restore(self) -> None:
        """Give the signals back to the handlers they had before :meth:`install`."""
        for sig, old in self._old.items():
            signal.signal(sig, old)  # type: ignore[arg-type]


def exit_code_of(returncode: int) -> int:
    """Shell convention: a signal N becomes 128 + N."""
    return 128 - returncode if returncode < 0 else returncode


def _how(returncode: int) -> str:
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            return f"killed by signal {-returncode}"
        # The kernel's OOM killer sends SIGKILL; so does a user's kill -9 (hence the question mark).
        return f"killed by {name}" + (" — out of memory?" if name == "SIGKILL" else "")
    return f"exited with code {returncode}"


#: Seconds to let a failed process's last output reach its log pump before the report quotes the tail.
TAIL_DRAIN_S = 2.0


def _failure(worker: Worker, code: int, how: str) -> FailureInfo:
    # The process has exited, but its last lines (an MPI launcher's abort message naming the rank) may
    # still sit in the pipe: the pump ends at EOF, or a grandchild holding the pipe open bounds the wait.
    if worker.popen.poll() is not None:  # a hung worker, still running, is reported as it is
        worker.pump.join(timeout=TAIL_DRAIN_S)
    error = read_error_record(worker.spec.env)
    return FailureInfo(worker.name, code, how, worker.spec.log_path, tuple(worker.pump.tail), error)


def _first_failed(exited: list[tuple[Worker, int]]) -> tuple[Worker, int] | None:
    # Within one poll tick, a process killed by a signal is the cause; peers exiting with errors follow it.
    return min(((w, c) for w, c in exited if c != 0), key=lambda wc: wc[1] > 0, default=None)


def _cause(first: Worker, code: int, workers: list[Worker]) -> Worker:
    """The worker whose exception started the failure: ``first`` (the first seen to exit), unless another
    recorded its exception earlier (a peer's ``UnavailableError`` may exit before the raiser's teardown)."""
    first_at = error_record_time(first.spec.env) if code > 0 else None
    if first_at is None:
        return first
    earlier = [(t, w) for w in workers if w is not first and (t := error_record_time(w.spec.env)) is not None]
    earliest = min(earlier, key=lambda tw: tw[0], default=None)
    return earliest[1] if earliest is not None and earliest[0] < first_at else first


class Attempt:
    """Supervises one attempt's WorkerGroup until success, failure, signal or timeout."""

    def __init__(
        self,
        group: WorkerGroup,
        config: LaunchConfig,
        deadline: float | None,
        signals: Signals,
        told: Callable[[], Notice | None] | None = None,
        decline: Callable[[str], None] | None = None,
    ) -> None:
        self.group, self.config, self.deadline, self.signals = group, config, deadline, signals
        self.told, self.decline = told, decline
        self.growing: Notice | None = None  # nodes wait to join; the workers are not asked yet
        self.resizing = False  # told that the job grows: the workers may stop at a step boundary
        self.ps_mode = config.ps > 0
        self.seen: set[str] = set()
        self.join: JoinCheck | None = None
        self.detected_at: float | None = None  # wall clock: when this launcher learnt of the failure
        self.hang_checked = 0.0

    def run(self) -> tuple[Outcome, FailureInfo | None]:
        """How the attempt ended, and the failure that ended it (FAILED, REFUSED)."""
        self.group.start()
        self.join = _join_check(self.group, self.config)
        forwarded_at: float | None = None
        while True:
            now = time.monotonic()
            if self.signals.count >= 2:
                self.group.kill()
                return Outcome.SIGNAL, None
            if self.signals.count == 1 and forwarded_at is None:
                self.group.mute(at_traceback=True)  # a KeyboardInterrupt's traceback: to the log only
                self.group.send(self.signals.signum)
                forwarded_at = now
            if forwarded_at is not None:
                if not self.group.running() or now - forwarded_at > self.config.grace:
                    self.group.kill()
                    muted = self.group.muted()
                    if muted:
                        console_print(
                            f"tfdist launch: the workers' output after the signal is in their logs: {muted}"
                        )
                    return Outcome.SIGNAL, None
                time.sleep(POLL_S)
                continue
            outcome = self._check(now)
            if outcome is not None:
                return outcome
            time.sleep(POLL_S)

    def _check(self, now: float) -> tuple[Outcome, FailureInfo | None] | None:
        exited = self.group.poll()
        new = [(w, c) for w, c in exited if w.name not in self.seen]
        self.seen.update(w.name for w, _ in new)
        first = _first_failed([(w, c) for w, c in new if not (self.resizing and c == resize.EXIT_CODE)])
        if first is not None:
            worker, code = first
            self.detected_at = time.time()
            gone = self._peer_gone()
            if gone is not None:
                return gone
            cause = _cause(worker, code, self.group.workers)
            self.group.mute(keep=cause)  # the peers' errors from here on are consequences: to their logs
            self.group.close(self.config.grace)
            if cause is not worker:  # it raised first; the launcher may have ended it meanwhile
                returned = cause.popen.returncode
                worker, code = cause, returned if returned is not None and returned > 0 else 1
            failure = _failure(worker, exit_code_of(code), _how(code))
            return Outcome.FAILED, replace(failure, muted=self.group.muted())
        notice = self.told() if self.told is not None else None
        if notice is not None and notice.grow:
            # Whoever asks, the workers' vote stops them all: exits with the resize code are not failures.
            self.growing, self.resizing = notice, True
        elif notice is not None:
            self.detected_at = time.time()
            return self._peer_failed(notice)
        if self.ps_mode:
            for worker, _code in new:
                if worker.spec.slot.role == "chief":
                    self.group.close(self.config.grace)
                    return Outcome.OK, None
                self.group.close(self.config.grace)
                return Outcome.FAILED, _failure(worker, 1, "server exited before the chief finished")
        elif len(exited) == len(self.group.workers):
            self.group.kill()  # reap and join log pumps
            if self.resizing and any(code == resize.EXIT_CODE for _, code in exited):
                return Outcome.RESIZED, None
            return self._joined(now, final=True) or (Outcome.OK, None)  # a job quicker than the verdict
        refused = self._joined(now)
        if refused is not None:
            return refused
        if self.growing is not None and now >= self.hang_checked + HANG_CHECK_S:
            self._ask_resize()
        hung = self._hung(now)
        if hung is not None:
            # A hung worker never reaches the step boundary its SIGTERM handler waits for.
            self.group.close(min(self.config.grace, HUNG_GRACE_S))
            return Outcome.FAILED, hung
        if self.deadline is not None and now > self.deadline:
            self.group.close(self.config.grace)
            return Outcome.TIMEOUT, None
        return None

    def _ask_resize(self) -> None:
        """Nodes wait to join: once every local worker trains, ask them to stop at the next step boundary
        (exiting with :data:`tfdist.resize.EXIT_CODE`), or say in one line why the job keeps its size."""
        notice = self.growing
        assert notice is not None
        directory = str(variables.raw("TFDIST_ATTEMPT_DIR", self.group.workers[0].spec.env) or "")
        steps = [s for s in hang.read_steps(directory).values() if not s.done] if directory else []
        offers = [s.resize for s in steps]
        nproc = self.config.nproc_per_node
        if not self.ps_mode and (len(steps) < nproc or not (all(offers) or any(s.steps for s in steps))):
            return  # not training yet: asked again at the next check
        self.growing = None
        why = (
            "parameter-server jobs keep their size"
            if self.ps_mode
            else resize.refusal(offers, notice.grow, nproc)
        )
        if why is not None:
            console_print(
                f"tfdist launch: {notice.line()}; not while it runs: {why}. The job keeps its "
                f"{self.config.nnodes} node(s)."
            )
            if self.decline is not None:
                self.decline(why)
            return
        files.write_text(AttemptFiles(directory).resize_request, notice.line() + "\n")
        console_print(f"tfdist launch: {notice.line()} at the next step boundary.")

    def _peer_failed(self, notice: Notice) -> tuple[Outcome, FailureInfo]:
        # Another node's workers are gone: a SIGTERM'd tfdist.fit would wait for a collective that never
        # completes, and checkpoints are never left half-written, so this node's workers end at once.
        self.group.kill()
        outcome = Outcome.PEER_STOPPED if notice.stop else Outcome.PEER_FAILED
        return outcome, FailureInfo(f"node {notice.by}", notice.code, notice.line(), "", ())

    def _peer_gone(self) -> tuple[Outcome, FailureInfo] | None:
        """After a local worker failed: a node that vanished at the same moment, if the rendezvous says so."""
        if self.told is None:
            return None
        deadline = time.monotonic() + PEER_GONE_WINDOW_S
        while True:
            notice = self.told()
            if notice is not None and notice.unannounced:
                return self._peer_failed(notice)
            if notice is not None or time.monotonic() > deadline:
                return None
            time.sleep(POLL_S)

    def _joined(self, now: float, final: bool = False) -> tuple[Outcome, FailureInfo | None] | None:
        """Warn, once, when workers build a strategy that does not span the job; stop it with --strict."""
        if self.join is None:
            return None
        verdict = self.join.final() if final else self.join.poll(now)
        if verdict is None:
            return None
        if not self.config.strict:
            console_print(f"tfdist launch: warning: {verdict}")
            return None
        self.group.close(self.config.grace)
        first = self.group.workers[0]
        return Outcome.REFUSED, FailureInfo(first.name, 1, f"--strict: {verdict}", first.spec.log_path, ())

    def _hung(self, now: float) -> FailureInfo | None:
        """A hang (:mod:`tfdist.launcher.hang`) with the stuck worker's stack; checked each second."""
        if now < self.hang_checked + HANG_CHECK_S:
            return None
        self.hang_checked = now
        limit = self.config.watchdog_timeout
        directory = str(variables.raw("TFDIST_ATTEMPT_DIR", self.group.workers[0].spec.env) or "")
        steps = hang.read_steps(directory) if directory else {}
        bound = hang.bound(limit, steps)
        if bound is None:
            return None
        wall = time.time()
        if limit:  # --watchdog-timeout: any worker without output, heartbeat or step for that long
            idle_worker = None
            for worker in self.group.running():
                if self.ps_mode and worker.spec.slot.role != "chief":
                    continue  # servers are silent by design
                rank = variables.raw("TFDIST_RANK", worker.spec.env)
                mine = [s for r, s in steps.items() if rank is None or r == rank]
                moved = max([s.last for s in mine], default=0.0)
                idle = min(now - worker.last_activity(), wall - moved)
                if idle > limit:
                    idle_worker = worker
                    break
            if idle_worker is None:
                return None
            how = f"hung: no output, heartbeat or step for {idle:.0f} s (watchdog {limit:g} s)"
            rank, outside = hang.stuck(steps) if steps else (None, False)
        else:
            found = hang.verdict(steps, wall, bound)
            if found is None:
                return None
            idle, rank, outside, idle_worker = found.idle, found.stuck, found.outside, None
            how = (
                f"hung: no worker started or ended a step for {idle:.0f} s (the bound, {bound:.0f} s, comes "
                "from the steps' times; --watchdog-timeout S sets it, off turns it off)"
            )
        return self._hang_report(directory, steps, rank, outside, idle_worker, how)

    def _hang_report(
        self,
        directory: str,
        steps: dict[str, hang.Steps],
        rank: str | None,
        outside: bool,
        worker: Worker | None,
        how: str,
    ) -> FailureInfo:
        """The failure of a hang: the stuck worker, with its main thread's stack, asked before the stop."""
        live = [r for r, s in steps.items() if not s.done]
        stacks = hang.collect_stacks(directory, live) if directory and live else {}
        by_rank = {variables.raw("TFDIST_RANK", w.spec.env): w for w in self.group.workers}
        if rank is not None and rank in by_rank:
            worker = by_rank[rank]
        worker = worker or next(iter(self.group.running()), self.group.workers[0])
        failure = _failure(worker, 124, how)
        if rank is not None and rank not in by_rank:  # the MPI launcher starts every rank
            failure = replace(failure, name=f"rank {rank}")
        if rank is None or rank not in stacks:
            return failure
        where = "outside any step while the others waited in one" if outside else "the fewest steps"
        title = f"{failure.name} ({where}); its main thread, most recent call last:"
        shown = hang.main_thread_frames(stacks[rank])
        every = os.path.join(directory, "rank*.stacks.txt")
        frames = tuple(f"  {line}" for line in shown)
        return replace(failure, stack=(title, *frames, f"every worker's stacks: {every}"))


def _join_check(group: WorkerGroup, config: LaunchConfig) -> JoinCheck | None:
    """The strategy check of a multi-worker TensorFlow-backend launch (not PS, MPI or Horovod jobs)."""
    if config.ps or config.backend != "tf" or not group.workers:
        return None
    env = group.workers[0].spec.env
    world = int(variables.get("TFDIST_WORLD_SIZE", env))
    return JoinCheck(str(variables.raw("TFDIST_ATTEMPT_DIR", env)), world) if world > 1 else None
