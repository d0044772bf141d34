"""``tfdist.launch``: start the workers, supervise them, restart or stop them, and report."""

from __future__ import annotations

import os
import secrets
import signal
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import FrameType
from typing import Any

from tfdist import variables
from tfdist.errors import ConfigError, WorkerFailedError
from tfdist.launch import hydra
from tfdist.launch.config import LaunchConfig
from tfdist.launch.gpus import visible_gpus
from tfdist.launch.join import JoinCheck
from tfdist.launch.logs import console_print, read_error_record
from tfdist.launch.outcome import FailureInfo, deterministic, failure_line, record_end, report
from tfdist.launch.plan import mpi_control_port, plan_mpi, plan_workers
from tfdist.launch.policy import Budget, Outcome, Stop, decide
from tfdist.launch.ports import free_ports
from tfdist.launch.preflight import mpi_flavour, preflight
from tfdist.launch.rendezvous.protocol import Notice
from tfdist.launch.workers import Worker, WorkerGroup

POLL_S = 0.05
#: How long a local worker's failure waits for the rendezvous to say a node vanished at the same moment
#: (both come from one lost host within milliseconds; a failure with no such notice waits this long once).
PEER_GONE_WINDOW_S = 0.5
#: Longest wait between SIGTERM and SIGKILL for workers the watchdog found hung.
HUNG_GRACE_S = 4.0
_PORT_CONFLICT = ("address already in use", "failed to add port", "could not start grpc server")


@dataclass(frozen=True)
class RunResult:
    """Outcome of a launch: exit code (0 = success), attempts made, run directory and first failure."""

    exit_code: int
    attempts: int
    run_dir: str
    duration_s: float
    failure: FailureInfo | None = None
    failures: tuple[FailureInfo, ...] = field(default_factory=tuple)


class _Signals:
    """Counts SIGINT/SIGTERM received by the launcher; installed only from the main thread."""

    def __init__(self) -> None:
        self.count = 0
        self.signum = 0
        self._old: dict[int, object] = {}

    def _handler(self, signum: int, frame: FrameType | None) -> None:
        self.count += 1
        self.signum = self.signum or signum

    def install(self) -> None:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._old[sig] = signal.signal(sig, self._handler)

    def restore(self) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)  # type: ignore[arg-type]


def new_run_id() -> str:
    """Sortable and unique: ``20261121-101500-3fa2``."""
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(2)


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
    failed = [(w, c) for w, c in exited if c != 0]
    # Within one poll tick, a process killed by a signal is the cause; peers exiting with errors follow it.
    failed.sort(key=lambda wc: 0 if wc[1] < 0 else 1)
    return failed[0] if failed else None


class _Attempt:
    """Supervises one attempt's WorkerGroup until success, failure, signal or timeout."""

    def __init__(
        self,
        group: WorkerGroup,
        config: LaunchConfig,
        deadline: float | None,
        signals: _Signals,
        told: Callable[[], Notice | None] | None = None,
    ) -> None:
        self.group, self.config, self.deadline, self.signals = group, config, deadline, signals
        self.told = told
        self.ps_mode = config.ps > 0
        self.seen: set[str] = set()
        self.join: JoinCheck | None = None
        self.detected_at: float | None = None  # wall clock: when this launcher learnt of the failure

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
                self.group.send(self.signals.signum)
                forwarded_at = now
            if forwarded_at is not None:
                if not self.group.running() or now - forwarded_at > self.config.grace:
                    self.group.kill()
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
        first = _first_failed(new)
        if first is not None:
            worker, code = first
            self.detected_at = time.time()
            gone = self._peer_gone()
            if gone is not None:
                return gone
            self.group.close(self.config.grace)
            return Outcome.FAILED, _failure(worker, exit_code_of(code), _how(code))
        notice = self.told() if self.told is not None else None
        if notice is not None:
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
            return self._joined(now, final=True) or (Outcome.OK, None)  # a job quicker than the verdict
        refused = self._joined(now)
        if refused is not None:
            return refused
        hung = self._hung(now)
        if hung is not None:
            # A hung worker never reaches the step boundary its SIGTERM handler waits for: a long grace
            # would only delay the end. The job ends within --watchdog-timeout + HUNG_GRACE_S (+ a poll).
            self.group.close(min(self.config.grace, HUNG_GRACE_S))
            return Outcome.FAILED, hung
        if self.deadline is not None and now > self.deadline:
            self.group.close(self.config.grace)
            return Outcome.TIMEOUT, None
        return None

    def _peer_failed(self, notice: Notice) -> tuple[Outcome, FailureInfo]:
        # Another node's workers are gone: no collective with them can complete, and a SIGTERM'd
        # tfdist.fit would wait for one (its save at the step boundary). Checkpoints are never left
        # half-written, so this node's workers are ended at once.
        self.group.kill()
        outcome = Outcome.PEER_STOPPED if notice.stop else Outcome.PEER_FAILED
        return outcome, FailureInfo(f"node {notice.by}", notice.code, notice.line(), "", ())

    def _peer_gone(self) -> tuple[Outcome, FailureInfo] | None:
        """After a local worker failed: a node that vanished at the same moment, if the rendezvous says so
        within :data:`PEER_GONE_WINDOW_S`. A lost host can reach this node first as its own worker's
        failure (MPICH's mpiexec exits 255 when a proxy's connection closes), and the report should name
        the cause, not the symptom; a node whose workers merely failed in turn is not the cause."""
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
        limit = self.config.watchdog_timeout
        if not limit:
            return None
        for worker in self.group.running():
            if self.ps_mode and worker.spec.slot.role != "chief":
                continue  # servers are silent by design
            idle = now - worker.last_activity()
            if idle > limit:
                return _failure(
                    worker, 124, f"hung: no output or heartbeat for {idle:.0f} s (watchdog {limit:g} s)"
                )
        return None


def _join_check(group: WorkerGroup, config: LaunchConfig) -> JoinCheck | None:
    """The strategy check of a multi-worker TensorFlow-backend launch (not PS, MPI or Horovod jobs)."""
    if config.ps or config.backend != "tf" or not group.workers:
        return None
    env = group.workers[0].spec.env
    world = int(variables.get("TFDIST_WORLD_SIZE", env))
    return JoinCheck(str(variables.raw("TFDIST_ATTEMPT_DIR", env)), world) if world > 1 else None


def launch(
    config: LaunchConfig,
    command: Sequence[str] | None = None,
    check: bool = False,
    rejoin: Callable[[int], LaunchConfig] | None = None,
    told: Callable[[], Notice | None] | None = None,
) -> RunResult:
    """Run ``command`` on every worker described by ``config``; supervise, restart and report.

    Returns a RunResult whose ``exit_code`` is 0 on success, the first failure's code (128+signal for a
    signal, 124 for a hang or timeout) otherwise. With ``check=True`` a job that ends with a worker's
    failure raises :class:`tfdist.errors.WorkerFailedError` instead (like ``subprocess.run(check=True)``).
    ``rejoin(attempt)``: before each restart, the nodes of the job as they meet again (a rendezvous
    round): its node count, this node's rank, the hosts and their ports replace ``config``'s.
    ``told()``: polled while workers run; a notice that another node of the job failed or left ends
    this node's attempt at once (then a restart, or the end of the job when that node ended it).
    """
    if command is not None:
        config = replace(config, command=tuple(command))
    if not config.command:
        raise ConfigError(
            "no script to run. Hint: tfdist launch -n 2 train.py [args...] or -m package.module."
        )
    machine = preflight(config)
    run_dir = os.path.abspath(config.log_dir or os.path.join("tfdist-runs", new_run_id()))
    gpus = visible_gpus(os.environ) if not config.cpu else []
    cpu_ids = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    cores = len(cpu_ids) or os.cpu_count() or 1
    mpiexec, flavour = machine.mpiexec, machine.mpi_flavour
    base_env: Mapping[str, str] = os.environ
    if machine.horovod_shim:
        console_print(
            "tfdist launch: Horovod is not installed here; for this job `import horovod` gives tfdist's "
            "implementation (tfdist.horovod, on the MPI backend)."
        )
        config = replace(config, backend="mpi")
        base_env = {**os.environ, "TFDIST_HOROVOD_SHIM": "1"}
    placement = _ray_placement(config)  # before our signal handlers: ray.init must not replace them
    signals = _Signals()
    signals.install()
    started = time.monotonic()
    deadline = started + config.timeout if config.timeout else None
    failures: list[FailureInfo] = []
    attempt, budget = 0, Budget()
    try:
        while True:
            if attempt and rejoin is not None:
                config = _regroup(config, rejoin(attempt))
            auto_ports = config.nnodes == 1 and config.base_port is None
            if placement is not None:
                specs = placement.plan(config, run_dir=run_dir, attempt=attempt, base_env=base_env)
            elif mpiexec:
                specs = plan_mpi(
                    config,
                    proxy=_hydra_proxy(config, mpiexec, flavour),
                    mpiexec=mpiexec,
                    cores=cores,
                    run_dir=run_dir,
                    attempt=attempt,
                    base_env=base_env,
                    flavour=flavour,
                    cpu_ids=cpu_ids,
                    visible_gpus=gpus,
                )
            else:
                specs = plan_workers(
                    config,
                    local_ports=free_ports(config.tasks_per_node) if auto_ports else None,
                    visible_gpus=gpus,
                    cores=cores,
                    run_dir=run_dir,
                    attempt=attempt,
                    base_env=base_env,
                    cpu_ids=cpu_ids,
                )
            if placement is not None:
                group = placement.group(specs, config, _console_names(config))
            else:
                group = WorkerGroup(specs, prefix=config.prefix, console_names=_console_names(config))
            supervised = _Attempt(group, config, deadline, signals, told)
            outcome, failure = supervised.run()
            record_end(run_dir, attempt, outcome, failure, supervised.detected_at)
            if failure is not None:
                failures.append(failure)
            decision = decide(
                outcome,
                budget,
                max_restarts=config.max_restarts,
                timeout=config.timeout,
                failure_code=failure.code if failure else 1,
                port_conflict=failure is not None and _port_conflict(failure),
                auto_ports=auto_ports,
                signum=signals.signum or signal.SIGINT,
                deterministic=deterministic(failure),
            )
            if decision.report_failure and failure is not None:
                report(failure, final=isinstance(decision, Stop) and decision.with_tail)
            if decision.message:
                console_print(f"tfdist launch: {decision.message}")
            if isinstance(decision, Stop) and failure is not None and deterministic(failure):
                console_print(f"tfdist launch: error: {failure_line(failure)}")  # the user's one line, last
            if isinstance(decision, Stop):
                elapsed = time.monotonic() - started
                result = RunResult(
                    decision.exit_code, attempt + 1, run_dir, elapsed, failure, tuple(failures)
                )
                if check and failure is not None and decision.exit_code != 0:
                    raise WorkerFailedError(failure.name, failure.code, failure.log_path, failure.how)
                return result
            budget = decision.budget
            attempt += 1
    finally:
        signals.restore()
        if placement is not None:
            placement.close()


def _regroup(config: LaunchConfig, met: LaunchConfig) -> LaunchConfig:
    """``config`` with the nodes of a new rendezvous round (the rest, as ``launch`` adjusted it, kept)."""
    if met.nnodes != config.nnodes:
        console_print(
            f"tfdist launch: the job goes on with {met.nnodes} node(s) instead of {config.nnodes} "
            f"({met.nnodes * config.nproc_per_node} workers; the script's global batch is unchanged)."
        )
    return replace(
        config, nnodes=met.nnodes, node_rank=met.node_rank, hosts=met.hosts, node_ports=met.node_ports
    )


def _ray_placement(config: LaunchConfig) -> Any:
    """With ``--ray``: the Ray placement group holding one bundle per worker (Ray imported only then)."""
    if config.ray is None:
        return None
    from tfdist.launch.ray_placement import RayPlacement

    return RayPlacement.open(config)


def _hydra_proxy(config: LaunchConfig, mpiexec: str, flavour: str) -> tuple[str, ...]:
    """This node's Hydra proxy command when MPI ranks span several nodes (``()`` on one node)."""
    if config.nnodes == 1:
        return ()
    if (flavour if flavour != "unknown" else mpi_flavour(mpiexec)) != "hydra":
        raise ConfigError(
            f"--backend {config.backend} on several nodes starts ranks through MPICH's Hydra, but {mpiexec} "
            f"is not Hydra. Hint: pip install 'tfdist[mpi]' (the mpich wheel), or start the job with "
            "mpirun/srun yourself."
        )
    control = f"{config.hosts[0]}:{mpi_control_port(config)}"
    proxy = hydra.proxy_argv(mpiexec, config.hosts, config.nproc_per_node, config.node_rank, control)
    wait = str(config.timeout or hydra.CONNECT_TIMEOUT_S)
    return (config.python, "-m", "tfdist.launch.hydra_proxy", wait, "--", *proxy)


def _console_names(config: LaunchConfig) -> set[str] | None:
    if not config.quiet_workers:
        return None
    return {"chief"} if config.uses_chief else {"w0"}


def _port_conflict(failure: FailureInfo) -> bool:
    text = "\n".join(failure.tail).lower()
    return any(marker in text for marker in _PORT_CONFLICT)
