"""A peer lost mid-training (who, where the run resumes, a Slurm requeue) or collectives that no longer meet
(which workers ran which, who the others waited for), found in TensorFlow's long error messages."""

from __future__ import annotations

import os
import re
import socket
import threading
from collections.abc import Callable, Mapping, Sequence

from tfdist._log import get_logger
from tfdist.nodes import address_of, host_name, split_address
from tfdist.slurm.commands import requeue_slurm_job

log = get_logger(__name__)

#: Exception types (by name: no TensorFlow import here) raised when a collective lost a peer.
PEER_ERRORS = ("UnavailableError", "DeadlineExceededError", "AbortedError", "CancelledError", "InternalError")
#: Words of those messages that mean a peer, not the local computation, failed.
_PEER_WORDS = re.compile(
    r"(connect|socket closed|connection reset|unhealthy|heartbeat|timed out|timeout|unavailable|aborted)",
    re.IGNORECASE,
)
_ADDRESS = re.compile(r"(?:ipv4:)?(\d{1,3}(?:\.\d{1,3}){3}):(\d+)")
_TASK = re.compile(r"/job:(\w+)/replica:\d+/task:(\d+)")


def is_peer_failure(exc: BaseException) -> bool:
    """Whether ``exc`` says another process of the job stopped answering (not a bug in this one).

    >>> class UnavailableError(Exception): pass
    >>> is_peer_failure(UnavailableError("failed to connect to all addresses")), is_peer_failure(ValueError())
    (True, False)
    """
    names = {cls.__name__ for cls in type(exc).__mro__}
    if names.isdisjoint(PEER_ERRORS):
        return False
    return bool(_PEER_WORDS.search(str(exc)))


def lost_peers(
    message: str,
    cluster: Mapping[str, Sequence[str]],
    resolve: Callable[[str], str | None] = address_of,
) -> list[str]:
    """The workers a TensorFlow error message names, as ``worker 1 (node2:20041)``, in cluster order.

    Input/Output: ``("ipv4:10.0.0.2:20041: Connection refused", {"worker": ["a:20040", "b:20041"]},
    {"b": "10.0.0.2"}.get)`` -> ``["worker 1 (b:20041)"]``.
    """
    by_address: dict[tuple[str, str], tuple[str, int, str]] = {}
    for task_type, addresses in cluster.items():
        for index, address in enumerate(addresses):
            host, port = split_address(address)
            entry = (task_type, index, address)
            by_address[(host, port)] = entry
            ip = resolve(host)
            if ip is not None:
                by_address[(ip, port)] = entry
    found = {by_address[a] for a in _ADDRESS.findall(message) if a in by_address}
    found |= {entry for (host, port), entry in by_address.items() if f"{host}:{port}" in message}
    for task_type, index in _TASK.findall(message):
        addresses = cluster.get(task_type, ())
        if int(index) < len(addresses):
            found.add((task_type, int(index), addresses[int(index)]))
    return [f"{t} {i} ({a})" for t, i, a in sorted(found, key=lambda e: (e[0], e[1]))]


#: Seconds a probe of a peer's port may take: a peer that does not accept within it does not answer.
PROBE_S = 1.0


def _knock(address: str, timeout: float) -> str | None:
    """Why the task at ``host:port`` is lost (``does not answer``, ``refuses connections``), or None."""
    host, port = split_address(address)
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            return None
    except ConnectionRefusedError:
        return "refuses connections: its process is gone"
    except TimeoutError:
        return f"does not answer within {timeout:g} s: host or link down"
    except OSError as exc:  # no route, network unreachable: the link is down
        return f"is unreachable ({exc.strerror or exc}): host or link down"


def probe(
    cluster: Mapping[str, Sequence[str]],
    timeout: float = PROBE_S,
    knock: Callable[[str, float], str | None] = _knock,
    name_of: Callable[[str, float], str | None] = host_name,
) -> list[str]:
    """The tasks of ``cluster`` that do not accept a connection now (all knocked at once), each with why:
    ``worker 1 on node2 (10.0.0.2:20041) does not answer within 1 s: host or link down``."""
    tasks = [(t, i, a) for t, addresses in cluster.items() for i, a in enumerate(addresses)]
    answers: dict[int, str | None] = {}

    def one(n: int) -> None:
        answers[n] = knock(tasks[n][2], timeout)

    threads = [threading.Thread(target=one, args=(n,), daemon=True) for n in range(len(tasks))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout + 1.0)
    lost = []
    for n, (task_type, index, address) in enumerate(tasks):
        why = answers.get(n)
        if why:
            name = name_of(split_address(address)[0], 1.0)
            where = f" on {name}" if name and not address.startswith(name + ":") else ""
            lost.append(f"{task_type} {index}{where} ({address}) {why}")
    return lost


_MISMATCH = re.compile(
    r"Shape mismatch in the collective instance (\d+).*?expected shape \[([^\]]*)\] but another member in "
    r"the group expected shape \[([^\]]*)\]",
    re.DOTALL,
)
# The same mistake when the two collectives differ in kind or data type rather than in shape.
_OTHER_KIND = re.compile(
    r"Collective instance (\d+) expected type (\d+) and data_type (\d+) "
    r"but got type (\d+) and data_type (\d+)"
)
#: TensorFlow's CollectiveType and DataType numbers, as the messages above give them.
_KINDS = {"0": "all-reduce", "1": "broadcast send", "2": "broadcast receive", "3": "all-gather"}
_DTYPES = {"1": "float32", "2": "float64", "3": "int32", "9": "int64", "14": "bfloat16", "19": "float16"}
_TIMED_OUT = re.compile(r"Collective has timed out (during execution|waiting for other workers)")


def collective_error(
    exc: BaseException,
    step: int,
    rank: int,
    timeout: float | None,
    roll: Callable[[], dict[int, bool]] | None = None,
) -> str | None:
    """The one line for TensorFlow's errors of collectives that no longer meet (different collectives at
    one point, or a timeout), else None. ``roll``: after a timeout, which other workers wait too.

    >>> collective_error(ValueError("Shape mismatch in the collective instance 7. Op at device x expected "
    ...     "shape [5] but another member in the group expected shape [387]."), 12, 1, 300.0)[:60]
    'the workers ran different collectives at step 12: rank 1 sen'
    """
    message = str(exc)
    branch = (
        "A worker took another branch: a callback, data or a condition on some workers only. Hint: give "
        "every worker the same collective program (tfdist.fit agrees on its own; check code that reads "
        "tfdist.rank())."
    )
    found = _MISMATCH.search(message)
    if found:
        instance, mine, theirs = found.groups()
        return (
            f"the workers ran different collectives at step {step}: rank {rank} sent [{mine}] values where "
            f"another worker sent [{theirs}] (TensorFlow's collective instance {instance}). {branch}"
        )
    other = _OTHER_KIND.search(message)
    if other:
        instance, kind, dtype, got_kind, got_dtype = other.groups()
        return (
            f"the workers ran different collectives at step {step}: rank {rank} met a "
            f"{_collective(got_kind, got_dtype)} where it expected an {_collective(kind, dtype)} "
            f"(TensorFlow's collective instance {instance}). {branch}"
        )
    if _TIMED_OUT.search(message):
        limit = f"TFDIST_COLLECTIVE_TIMEOUT={timeout:g} s" if timeout else "the collective timeout"
        answers = roll() if roll is not None else {}
        absent = sorted(r for r, waiting in answers.items() if not waiting)
        also = sorted(r for r, waiting in answers.items() if waiting)
        who = (
            f"rank(s) {', '.join(map(str, absent))} had not arrived"
            if absent
            else "another worker did not arrive"
        )
        waiting = f"; rank(s) {', '.join(map(str, also))} waited too" if also else ""
        return (
            f"a collective of step {step} waited longer than {limit} on rank {rank}: {who} (stuck, or "
            f"running other code: a callback or data on some workers only){waiting}. Hint: read those "
            "workers' logs for where they were; raise TFDIST_COLLECTIVE_TIMEOUT for slow saves."
        )
    return None


#: Seconds a worker whose collective timed out waits for the others to say they wait too.
ROLL_CALL_S = 3.0


def roll_call(rank: int, world: int, step: int, grace_s: float = ROLL_CALL_S) -> dict[int, bool]:
    """Which other workers wait in a collective too ({rank: said so within ``grace_s``}), through
    TensorFlow's coordination service; empty when it cannot be reached."""
    import time

    try:
        from tensorflow.python.eager import context as eager

        ctx = eager.context()
        ctx.set_config_key_value(f"tfdist/waiting/{rank}", str(step))
    except Exception:  # no coordination service (one worker, another strategy): nothing to ask
        return {}
    deadline = time.monotonic() + grace_s
    answers: dict[int, bool] = {}
    for other in range(world):
        if other == rank:
            continue
        left_ms = max(1, int((deadline - time.monotonic()) * 1000))
        try:
            ctx.get_config_key_value(f"tfdist/waiting/{other}", left_ms)
            answers[other] = True
        except Exception:  # not written within the grace: not waiting in a collective
            answers[other] = False
    return answers


def _collective(kind: str, dtype: str) -> str:
    return f"{_KINDS.get(kind, 'collective ' + kind)} of {_DTYPES.get(dtype, 'data type ' + dtype)}"


def report(
    exc: BaseException,
    step: int,
    cluster: Mapping[str, Sequence[str]],
    checkpoint: str | None,
    checkpoint_step: int | None,
) -> str:
    """Log the one-line report of a lost peer (and ask Slurm to requeue the job); return the line."""
    peers = lost_peers(str(exc), cluster) or probe(cluster)
    who = ", ".join(peers) if peers else "a peer (the error does not say which; every peer still answers)"
    if checkpoint:
        where = f"last checkpoint {checkpoint} (step {checkpoint_step})"
    else:
        where = "no checkpoint written (pass checkpoint_dir= to resume after a failure)"
    line = f"lost contact with {who} at step {step} ({type(exc).__name__}); {where}"
    log.error("%s", line)
    if checkpoint and os.environ.get("SLURM_JOB_ID"):
        requeue_slurm_job(f"it resumes from step {checkpoint_step} once its nodes are back")
    return line
