"""The launcher's restart policy: every outcome x budget, without starting a process."""

from __future__ import annotations

import signal

import pytest

from tfdist.launcher.policy import PORT_RETRIES, Budget, Outcome, Restart, Stop, decide


@pytest.mark.parametrize(
    ("outcome", "budget", "kwargs", "expected"),
    [
        (Outcome.OK, Budget(), {}, Stop(0)),
        (Outcome.OK, Budget(restarts=1), {"max_restarts": 1}, Stop(0)),
        (Outcome.FAILED, Budget(), {"failure_code": 3}, Stop(3, report_failure=True)),
        (
            Outcome.FAILED,
            Budget(),
            {"failure_code": 137, "max_restarts": 2},
            Restart(Budget(restarts=1), "restarting all workers (restart 1/2).", True),
        ),
        (
            Outcome.FAILED,
            Budget(restarts=1),
            {"failure_code": 137, "max_restarts": 2},
            Restart(Budget(restarts=2), "restarting all workers (restart 2/2).", True),
        ),
        (
            Outcome.FAILED,
            Budget(restarts=2),
            {"failure_code": 137, "max_restarts": 2},
            Stop(137, "gave up after 3 attempts (--max-restarts 2).", True),
        ),
        # A port taken between choosing and binding: new ports, without spending a restart.
        (
            Outcome.FAILED,
            Budget(),
            {"port_conflict": True, "auto_ports": True},
            Restart(
                Budget(port_retries=1),
                f"a port was taken by another program; retrying with new ports (1/{PORT_RETRIES}).",
                False,
            ),
        ),
        (
            Outcome.FAILED,
            Budget(port_retries=PORT_RETRIES),
            {"port_conflict": True, "auto_ports": True, "failure_code": 1},
            Stop(1, None, True),
        ),
        # Ports the user chose are not retried: the conflict is theirs to fix.
        (Outcome.FAILED, Budget(), {"port_conflict": True, "failure_code": 1}, Stop(1, None, True)),
        # --strict refusing a strategy: deterministic, never restarted, reported without the log tail.
        (Outcome.REFUSED, Budget(), {"max_restarts": 5}, Stop(1, None, True, with_tail=False)),
        (
            Outcome.SIGNAL,
            Budget(),
            {"signum": signal.SIGTERM, "max_restarts": 5},
            Stop(143, "stopped by SIGTERM; all workers ended."),
        ),
        (Outcome.SIGNAL, Budget(), {}, Stop(130, "stopped by SIGINT; all workers ended.")),
        # A worker's ConfigError (exit 2): the same inputs give it again, so restarts left are kept.
        (
            Outcome.FAILED,
            Budget(),
            {"failure_code": 2, "max_restarts": 3, "deterministic": True},
            Stop(2, "not restarted: the same error would come back.", True, with_tail=False),
        ),
        (
            Outcome.FAILED,
            Budget(restarts=1),
            {"failure_code": 2, "max_restarts": 1, "deterministic": True},
            Stop(2, None, True, with_tail=False),
        ),
        # Another node failed (told through the rendezvous): a restart like this node's own failure ...
        (
            Outcome.PEER_FAILED,
            Budget(),
            {"max_restarts": 1},
            Restart(Budget(restarts=1), "restarting all workers (restart 1/1).", True),
        ),
        (
            Outcome.PEER_FAILED,
            Budget(restarts=1),
            {"max_restarts": 1},
            Stop(1, "gave up after 2 attempts (--max-restarts 1).", True),
        ),
        # ... unless it ended the job for good: this node ends with its code, restarts left or not.
        (
            Outcome.PEER_STOPPED,
            Budget(),
            {"failure_code": 2, "max_restarts": 3},
            Stop(2, None, True, with_tail=False),
        ),
        # Workers that stopped at a step boundary for nodes that wait to join spend no restart, even with
        # none left.
        (
            Outcome.RESIZED,
            Budget(restarts=1),
            {"max_restarts": 1},
            Restart(Budget(restarts=1), "the job meets again with the nodes that wait to join.", False),
        ),
        (
            Outcome.TIMEOUT,
            Budget(),
            {"timeout": 30.0, "max_restarts": 5},
            Stop(124, "--timeout 30 s reached; all workers stopped."),
        ),
    ],
)
def test_decide(
    outcome: Outcome, budget: Budget, kwargs: dict[str, object], expected: Restart | Stop
) -> None:
    kwargs = {"max_restarts": 0, **kwargs}
    assert decide(outcome, budget, **kwargs) == expected  # type: ignore[arg-type]
