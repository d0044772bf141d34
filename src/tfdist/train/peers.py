"""When a peer is lost mid-training: say who, where the run can resume, and ask Slurm to run the job again.

TensorFlow reports a lost peer as an ``UnavailableError`` / ``DeadlineExceededError`` (or an aborted
collective) whose message names the peer by address (``ipv4:10.0.0.2:20041``), by ``host:port`` or by task
(``/job:worker/replica:0/task:1``), buried in hundreds of lines. A 100-node job needs the one line: which
worker on which node stopped answering, and from which checkpoint the job goes on.
"""

from __future__ import annotations

import os
import re
import socket
import threading
from collections.abc import Callable, Mapping, Sequence

from tfdist import variables
from tfdist._log import get_logger

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
    resolve: Callable[[str], str] = socket.gethostbyname,
) -> list[str]:
    """The workers a TensorFlow error message names, as ``worker 1 (node2:20041)``, in cluster order.

    Input/Output: ``("ipv4:10.0.0.2:20041: Connection refused", {"worker": ["a:20040", "b:20041"]},
    {"b": "10.0.0.2"}.get)`` -> ``["worker 1 (b:20041)"]``.
    """
    by_address: dict[tuple[str, str], tuple[str, int, str]] = {}
    for task_type, addresses in cluster.items():
        for index, address in enumerate(addresses):
            host, _, port = address.rpartition(":")
            entry = (task_type, index, address)
            by_address[(host, port)] = entry
            try:
                by_address[(resolve(host), port)] = entry
            except (OSError, UnicodeError):
                pass
    found: set[tuple[str, int, str]] = set()
    for ip, port in _ADDRESS.findall(message):
        if (ip, port) in by_address:
            found.add(by_address[(ip, port)])
    for host, port in by_address:
        if f"{host}:{port}" in message:
            found.add(by_address[(host, port)])
    for task_type, index in _TASK.findall(message):
        addresses = cluster.get(task_type, ())
        if int(index) < len(addresses):
            found.add((task_type, int(index), addresses[int(index)]))
    return [f"{t} {i} ({a})" for t, i, a in sorted(found, key=lambda e: (e[0], e[1]))]


#: Seconds a probe of a peer's port may take: a peer that does not accept within it does not answer.
PROBE_S = 1.0


def _knock(address: str, timeout: float) -> str | None:
    """Why the task at ``host:port`` is lost (``does not answer``, ``refuses connections``), or None."""
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            return None
    except ConnectionRefusedError:
        return "refuses connections: its process is gone"
    except TimeoutError:
        return f"does not answer within {timeout:g} s: host or link down"
    except OSError as exc:  # no route, network unreachable: the link is down
        return f"is unreachable ({exc.strerror or exc}): host or link down"


def _host_name(ip: str, timeout: float) -> str | None:
    """The name ``ip`` resolves back to, within ``timeout`` (a slow resolver is not waited for)."""
    found: list[str] = []

    def look() -> None:
        try:
            found.append(socket.gethostbyaddr(ip)[0])
        except (OSError, UnicodeError):
            pass

    thread = threading.Thread(target=look, daemon=True)
    thread.start()
    thread.join(timeout)
    return found[0] if found else None


def probe(
    cluster: Mapping[str, Sequence[str]],
    timeout: float = PROBE_S,
    knock: Callable[[str, float], str | None] = _knock,
    name_of: Callable[[str, float], str | None] = _host_name,
) -> list[str]:
    """The tasks of ``cluster`` that do not accept a connection now, each with why, in cluster order:
    ``worker 1 on node2 (10.0.0.2:20041) does not answer within 1 s: host or link down``. All tasks are
    knocked at once, so this takes at most ``timeout`` (+ a name lookup's second) whatever the size.

    Used when the error names no one (a collective that timed out): a healthy peer still listens at
    that moment, a peer behind a cut link does not answer, and a dead peer's host refuses.
    """
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
            name = name_of(address.rpartition(":")[0], 1.0)
            where = f" on {name}" if name and not address.startswith(name + ":") else ""
            lost.append(f"{task_type} {index}{where} ({address}) {why}")
    return lost


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


def requeue_slurm_job(why: str) -> None:
    """Ask Slurm to run this job again (``scontrol requeue``); TFDIST_REQUEUE=0 opts out."""
    from tfdist.errors import TfdistError
    from tfdist.slurm import commands

    job_id = os.environ.get("SLURM_JOB_ID")
    if not job_id or not variables.get("TFDIST_REQUEUE"):
        return
    try:
        commands.requeue(job_id)
        log.warning("asked Slurm to requeue job %s; %s", job_id, why)
    except TfdistError as exc:  # e.g. submitted without --requeue, or another task asked first
        log.warning("could not requeue job %s: %s", job_id, exc)
