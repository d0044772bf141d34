"""What the launcher does after an attempt ends (an :class:`Outcome`): the restart policy, pure."""

from __future__ import annotations

import signal
from dataclasses import dataclass, replace
from enum import Enum

#: New ports tried when another program took one between choosing and binding (single-node launches).
PORT_RETRIES = 3
#: Exit code of a hang (watchdog) or of --timeout, as timeout(1) uses.
TIMEOUT_CODE = 124


class Outcome(Enum):
    """How one attempt ended."""

    OK = "ok"  # every worker (or the PS chief) exited 0
    FAILED = "failed"  # a worker failed first (exit code, signal, hang)
    REFUSED = "refused"  # --strict: the workers' strategy does not span the job (deterministic)
    SIGNAL = "signal"  # the launcher was interrupted (Ctrl-C, SIGTERM)
    TIMEOUT = "timeout"  # --timeout reached
    PEER_FAILED = "peer_failed"  # another node of the job failed or left (told through the rendezvous)
    PEER_STOPPED = "peer_stopped"  # another node ended the job for good (its error comes back on a restart)
    RESIZED = "resized"  # the workers stopped at a step boundary for nodes that wait to join


@dataclass(frozen=True)
class Budget:
    """What the job has used so far: restarts after failures, retries after port conflicts."""

    restarts: int = 0
    port_retries: int = 0


@dataclass(frozen=True)
class Restart:
    """Start another attempt."""

    budget: Budget
    message: str
    report_failure: bool  # print the failure that caused the restart first


@dataclass(frozen=True)
class Stop:
    """End the launch with ``exit_code``."""

    exit_code: int
    message: str | None = None
    report_failure: bool = False  # print the failure
    with_tail: bool = True  # ... and the tail of its log


def decide(
    outcome: Outcome,
    budget: Budget,
    *,
    max_restarts: int,
    timeout: float | None = None,
    failure_code: int = 1,
    port_conflict: bool = False,
    auto_ports: bool = False,
    signum: int = signal.SIGINT,
    deterministic: bool = False,
) -> Restart | Stop:
    """The next step after an attempt ended with ``outcome``; ``deterministic``: a restart would give the
    same failure (a worker's ConfigError), so none is spent on it.

    Input/Output: ``decide(Outcome.FAILED, Budget(), max_restarts=1, failure_code=137)`` ->
    ``Restart(Budget(restarts=1), "restarting all workers (restart 1/1).", report_failure=True)``.
    """
    if outcome is Outcome.OK:
        return Stop(0)
    if outcome is Outcome.RESIZED:  # nothing failed: no restart is spent
        return Restart(budget, "the job meets again with the nodes that wait to join.", report_failure=False)
    if outcome is Outcome.SIGNAL:
        return Stop(128 + signum, f"stopped by {signal.Signals(signum).name}; all workers ended.")
    if outcome is Outcome.TIMEOUT:
        return Stop(TIMEOUT_CODE, f"--timeout {timeout or 0:g} s reached; all workers stopped.")
    # REFUSED: a restart would build the same strategy again; PEER_STOPPED: the other node ends the job.
    if outcome in (Outcome.REFUSED, Outcome.PEER_STOPPED):
        return Stop(failure_code, report_failure=True, with_tail=False)
    if outcome is Outcome.FAILED and deterministic:
        message = "not restarted: the same error would come back." if max_restarts > budget.restarts else None
        return Stop(failure_code, message, report_failure=True, with_tail=False)
    if auto_ports and port_conflict and budget.port_retries < PORT_RETRIES:
        used = replace(budget, port_retries=budget.port_retries + 1)
        message = (
            "a port was taken by another program; "
            f"retrying with new ports ({used.port_retries}/{PORT_RETRIES})."
        )
        return Restart(used, message, report_failure=False)
    if budget.restarts < max_restarts:
        used = replace(budget, restarts=budget.restarts + 1)
        return Restart(used, f"restarting all workers (restart {used.restarts}/{max_restarts}).", True)
    gave_up = (
        f"gave up after {budget.restarts + 1} attempts (--max-restarts {max_restarts})."
        if max_restarts
        else None
    )
    return Stop(failure_code, gave_up, report_failure=True)
