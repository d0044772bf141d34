"""``tfdist.launch``: start the workers, supervise them, restart or stop them, and report."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

from tfdist.errors import ConfigError, WorkerFailedError
from tfdist.launcher.assignment import Notice
from tfdist.launcher.attempt import Attempt, Signals
from tfdist.launcher.config import LaunchConfig
from tfdist.launcher.console import console_print
from tfdist.launcher.membership import Membership, open_membership, placed
from tfdist.launcher.outcome import (
    FailureInfo,
    RunResult,
    deterministic,
    failure_line,
    new_run_id,
    record_end,
    report,
    user_error,
)
from tfdist.launcher.placement import Devices, open_placement
from tfdist.launcher.policy import Budget, Stop, decide
from tfdist.launcher.preflight import preflight
from tfdist.nodes import visible_gpus

_PORT_CONFLICT = ("address already in use", "failed to add port", "could not start grpc server")


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
    ``rejoin(attempt)``: before each restart, the nodes of the job as they meet again (else they come
    from ``config`` as on the command line: :func:`tfdist.launcher.membership.open_membership`).
    ``told()``: polled while workers run; a notice that another node failed or left ends this attempt.
    """
    if command is not None:
        config = replace(config, command=tuple(command))
    if not config.command:
        raise ConfigError(
            "no script to run. Hint: tfdist launch -n 2 train.py [args...] or -m package.module."
        )
    if config.host_slots:
        from tfdist.launcher import fanout

        return fanout.launch_on_hosts(config, check=check)
    member = open_membership(config, os.environ) if rejoin is None else None
    if member is None:
        return _supervise(config, check, rejoin, told)
    result: RunResult | None = None
    try:
        # Every restart meets again; a rendezvous checked this node before meeting (preflight).
        first = _meet(member, config, check=not member.ports_agreed)
        result = _supervise(
            first, check, lambda _attempt: _meet(member, config), member.notice, member.decline
        )
        return result
    finally:
        _leave(member, result)


def _meet(member: Membership, config: LaunchConfig, *, check: bool = False) -> LaunchConfig:
    """``config`` as the membership answers now; ``check``: this node's checks first (one line printed)."""
    assignment = member.meet()
    met = placed(config, member, assignment)
    if check:
        preflight(met)
    if member.ports_agreed or assignment.nnodes > 1:
        console_print(f"tfdist launch: {assignment.summary()}")
    return met


def _leave(member: Membership, result: RunResult | None) -> None:
    """Leave the job's membership, telling the other nodes whether the job ended well here or for good."""
    if result is not None and result.exit_code == 0:
        member.close()
        return
    failure = result.failure if result is not None else None
    code = result.exit_code if result is not None else 1
    why = failure_line(failure) if failure is not None else f"its launcher stopped (exit code {code})"
    member.close(stop=True, code=code, why=why)


def _supervise(
    config: LaunchConfig,
    check: bool,
    rejoin: Callable[[int], LaunchConfig] | None,
    told: Callable[[], Notice | None] | None,
    decline: Callable[[str], None] | None = None,
) -> RunResult:
    """This node's workers, attempt after attempt, until the restart policy says stop."""
    machine = preflight(config)
    run_dir = os.path.abspath(config.run_dir or os.path.join("tfdist-runs", new_run_id()))
    cpu_ids = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    devices = Devices(visible_gpus(os.environ) if not config.cpu else [], cpu_ids)
    base_env: Mapping[str, str] = os.environ
    if machine.horovod_shim:
        console_print(
            "tfdist launch: Horovod is not installed here; for this job `import horovod` gives tfdist's "
            "implementation (tfdist.horovod, on the MPI backend)."
        )
        config = replace(config, backend="mpi")
        base_env = {**os.environ, "TFDIST_HOROVOD_SHIM": "1"}
    placement = open_placement(config, machine, devices)  # before our signal handlers (ray.init's own)
    signals = Signals()
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
            specs = placement.plan(config, run_dir=run_dir, attempt=attempt, base_env=base_env)
            group = placement.group(specs, config, _console_names(config))
            supervised = Attempt(group, config, deadline, signals, told, decline)
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
            if isinstance(decision, Stop) and failure is not None and user_error(failure):
                console_print(f"tfdist launch: error: {failure_line(failure)}")  # the user's one line, last
            if isinstance(decision, Stop):
                if check and failure is not None and decision.exit_code != 0:
                    raise WorkerFailedError(failure.name, failure.code, failure.log_path, failure.how)
                elapsed = time.monotonic() - started
                return RunResult(decision.exit_code, attempt + 1, run_dir, elapsed, failure, tuple(failures))
            budget = decision.budget
            attempt += 1
    finally:
        signals.restore()
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


def _console_names(config: LaunchConfig) -> set[str] | None:
    return ({"chief"} if config.uses_chief else {"w0"}) if config.quiet_workers else None


def _port_conflict(failure: FailureInfo) -> bool:
    text = "\n".join(failure.tail).lower()
    return any(marker in text for marker in _PORT_CONFLICT)
