"""The rendezvous protocol: messages, authentication and the assignment of ranks. Pure (no sockets).

One JSON object per line, at most :data:`MAX_MESSAGE` bytes (the assignment: :func:`reply_limit`):

1. server -> node: ``{"hello": "tfdist-rdzv/1", "nonce": HEX}``
2. node -> server: ``{"join": {...}, "mac": HMAC-SHA256(token, nonce + canonical join)}``
3. server -> node, once every node arrived: ``{"assignment": {...}}``, or at any time ``{"error": LINE}``;
   the connection then stays open while the job runs:
4. node -> server, before it closes: ``{"leave": {"stop": BOOL, "code": N, "why": LINE}}``;
5. server -> every other node of the round, once, when a node fails or leaves: ``{"notice": {...}}``.

The nonce makes a recorded join useless on another connection; the token never crosses the wire.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Collection, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from tfdist import nodes
from tfdist.errors import ConfigError

# What a membership answers (the assignment, a notice) travels on this wire as JSON; named here too.
from tfdist.launcher.assignment import CLOSED as CLOSED
from tfdist.launcher.assignment import ENDPOINT_GONE as ENDPOINT_GONE
from tfdist.launcher.assignment import SILENT as SILENT
from tfdist.launcher.assignment import Assignment as Assignment
from tfdist.launcher.assignment import Notice as Notice

VERSION = "tfdist-rdzv/1"
#: Longest line either side sends but the assignment (a join names one node, whatever the job's size).
MAX_MESSAGE = 16 * 1024
#: Most ports (tasks) one node brings.
MAX_PORTS = 1024
#: Longest host name (DNS) and textual address (IPv6 with an IPv4 tail) a node is known by.
MAX_NAME = 253
MAX_ADDRESS = 45
#: Most nodes a client expects when its caller does not say (the launcher always says: its --nnodes MAX).
DEFAULT_MAX_NODES = 4096


def reply_limit(max_nodes: int, tasks: int) -> int:
    """The longest assignment line for at most ``max_nodes`` nodes of ``tasks`` ports each.

    Input/Output: ``reply_limit(1024, 8)`` -> ``1024 * (2 * 253 + 45 + 8 * 6 + 16) + 4096`` = 630,784 bytes.
    """
    per_node = 2 * MAX_NAME + MAX_ADDRESS + 6 * max(1, tasks) + 16  # a name's JSON escapes at most double it
    return max(MAX_MESSAGE, max(1, max_nodes) * per_node + 4096)


@dataclass(frozen=True)
class JoinRequest:
    """What a node says about itself and the job it belongs to."""

    name: str  # the node's host name (ranks are assigned in the order of these names)
    nproc: int  # workers on this node (-n)
    command: str  # the job's command, for the mismatch message
    digest: str  # SHA-256 of the command and launch options every node must share
    ports: tuple[int, ...]  # free ports on this node, one per task
    pid: int
    launcher: str = ""  # a random id per launcher process: tells a retry from a twin of the same name

    @property
    def who(self) -> tuple[int, str]:
        """Which launcher sent the join (pid and id)."""
        return self.pid, self.launcher

    def to_dict(self) -> dict[str, Any]:
        """The join as sent (the command cut to what the server keeps, so the line stays small)."""
        return {**asdict(self), "command": self.command[:300], "ports": list(self.ports)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> JoinRequest:
        """Parse and check a join sent by a node; ValueError on anything malformed."""
        try:
            request = cls(
                name=str(data["name"]),
                nproc=int(data["nproc"]),
                command=str(data["command"])[:300],
                digest=str(data["digest"]),
                ports=tuple(int(p) for p in data["ports"]),
                pid=int(data["pid"]),
                launcher=str(data.get("launcher", ""))[:64],
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"malformed join: {exc}") from None
        name = request.name
        if (
            not name
            or len(name) > MAX_NAME
            or not (name.isascii() and name.isprintable())
            or request.nproc < 1
        ):
            raise ValueError("malformed join: name or nproc")
        if len(request.ports) > MAX_PORTS or not all(0 < p <= nodes.MAX_PORT for p in request.ports):
            raise ValueError("malformed join: ports")
        return request


def leave_notice(name: str, leave: Mapping[str, Any] | None, silent: bool = False) -> Notice | None:
    """The notice for the others when node ``name`` closes after ``leave`` (None: without one; ``silent``:
    timed out rather than closed).

    Input/Output: ``("b", {"stop": False, "code": 0, "why": ""})`` -> None (the job ended well there);
    ``("b", None)`` -> ``Notice("b", "its launcher's connection to the rendezvous closed …")``.
    """
    if leave is None and silent:
        return Notice(name, SILENT)
    if leave is None:
        return Notice(name, CLOSED)
    if not leave.get("stop"):
        return None
    code = leave.get("code")
    return Notice(name, str(leave.get("why") or "stopped")[:500], True, code if isinstance(code, int) else 1)


def some(names: Sequence[str], shown: int = 8) -> str:
    """``names`` for a one-line message: the first few and how many more.

    Input/Output: ``some(["a", "b", "c"], 2)`` -> ``"a, b and 1 more"``.
    """
    more = len(names) - shown
    return ", ".join(names[:shown]) + (f" and {more} more" if more > 0 else "")


def encode(message: Mapping[str, Any]) -> bytes:
    """One protocol line."""
    return json.dumps(message, sort_keys=True, separators=(",", ":")).encode() + b"\n"


def assignment_lines(assignment: Assignment) -> tuple[bytes, bytes]:
    """The assignment encoded once for every node: node ``r``'s line is ``head + b"%d" % r + tail``.

    Input/Output: ``Assignment(0, ("a",), ...)`` -> ``(b'{"assignment":{..., "round":0,"node_rank":',
    b'}}\\n')``.
    """
    body = asdict(assignment)
    del body["node_rank"]
    line = encode({"assignment": body})
    return line[:-3] + b',"node_rank":', b"}}\n"


def decode(line: bytes, limit: int = MAX_MESSAGE) -> dict[str, Any]:
    """The object of one line; ValueError when it is not a JSON object or longer than ``limit``."""
    if len(line) > limit:
        raise ValueError("message too long")
    try:
        value = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"not a protocol message: {exc}") from None
    if not isinstance(value, dict):
        raise ValueError("not a protocol message")
    return value


def mac(token: str, nonce: str, join: Mapping[str, Any]) -> str:
    """HMAC-SHA256 of the nonce and the canonical join under the job's token."""
    body = nonce.encode() + json.dumps(join, sort_keys=True, separators=(",", ":")).encode()
    return hmac.new(token.encode(), body, hashlib.sha256).hexdigest()


def verify(token: str, nonce: str, message: Mapping[str, Any]) -> JoinRequest:
    """The join of an authenticated message; ValueError for a wrong token or a malformed join."""
    join, given = message.get("join"), message.get("mac")
    if not isinstance(join, dict) or not isinstance(given, str):
        raise ValueError("not a join")
    if not hmac.compare_digest(mac(token, nonce, join), given):
        raise ValueError("wrong token")
    return JoinRequest.from_dict(join)


def mismatch(first: JoinRequest, other: JoinRequest) -> str | None:
    """Why ``other`` cannot join the job ``first`` started, or None.

    Input/Output: ``-n 2`` first, ``-n 4`` other -> ``"node b was started with -n 4, the job with -n 2 …"``.
    """
    if other.nproc != first.nproc:
        return (
            f"node {other.name} was started with -n {other.nproc}, but the job at this endpoint runs -n "
            f"{first.nproc} (node {first.name}). Hint: the same command on every node."
        )
    if other.digest != first.digest:
        return (
            f"node {other.name} runs `{other.command}`, but the job at this endpoint runs `{first.command}` "
            f"(node {first.name}). Hint: the same command on every node, or another --rdzv port for another "
            "job."
        )
    return None


def ready(
    joined: Collection[str],
    live_members: Collection[str],
    min_nodes: int,
    max_nodes: int,
    waited: float,
    last_call: float,
) -> bool:
    """Whether the nodes ``joined`` form the next round now: at once with ``max_nodes``, or ``min_nodes``
    when every ``live_members`` (of the previous round, still connected) is back, else after ``last_call``
    seconds (``waited`` since this round's first join) with ``min_nodes``.

    Input/Output: ``(["a", "b"], ["a", "b", "c"], 2, 3, 1.0, 10.0)`` -> False (c still holds on);
    ``(["a", "b"], ["a", "b"], 2, 3, 0.0, 10.0)`` -> True (c is gone, a and b are back);
    ``(["c"], ["a", "b"], 1, 3, 60.0, 10.0)`` -> False (a and b still run: c waits for their restart).
    """
    names = set(joined)
    back = len(names & set(live_members))
    return forms(len(names), back, len(set(live_members)), min_nodes, max_nodes, waited, last_call)


def forms(
    joined: int, back: int, live: int, min_nodes: int, max_nodes: int, waited: float, last_call: float
) -> bool:
    """:func:`ready` from counts (``back``: joined members of the previous round; ``live``: still connected).

    Input/Output: ``forms(2, 2, 3, 2, 3, 1.0, 10.0)`` -> False (the third member still holds on).
    """
    if live and not back:
        return False  # the round runs: nodes that join now wait for its next restart
    if joined >= max_nodes:
        return True
    if joined < min_nodes:
        return False
    if live and back >= live:
        return True
    return waited >= last_call


def assign(requests: Sequence[tuple[JoinRequest, str]], endpoint: str, round_: int = 0) -> Assignment:
    """Ranks for the nodes that arrived (with the address each connected from), by name then address, so
    the order of arrival does not matter; ``node_rank`` is 0 (each node's rank is its index in ``names``)."""
    ordered = sorted(requests, key=lambda r: (r[0].name, r[1]))
    names = [r.name for r, _ in ordered]
    if len(set(names)) != len(names):
        twice = next(n for n in names if names.count(n) > 1)
        raise ConfigError(
            f"two nodes call themselves {twice!r}: each node of a job needs its own host name. Hint: one "
            "tfdist launch per node."
        )
    return Assignment(
        node_rank=0,
        names=tuple(names),
        addresses=tuple(address for _, address in ordered),
        ports=tuple(r.ports for r, _ in ordered),
        nproc=ordered[0][0].nproc,
        endpoint=endpoint,
        round=round_,
    )


def formed_without(endpoint: str, name: str, formed: Sequence[str]) -> str:
    """The line for node ``name`` arriving after the job's last round formed (of the nodes ``formed``)."""
    return (
        f"the rendezvous at {endpoint} belongs to a job that already formed without node {name} "
        f"({len(formed)} node(s): {some(formed)}) and takes no more nodes (no restart left). Hint: another "
        "--rdzv port for another job."
    )


def job_full(endpoint: str, most: int, running: int, waiting: int, name: str) -> str:
    """The line for node ``name`` when ``running`` members and ``waiting`` newcomers fill ``most`` nodes."""
    return (
        f"the job at {endpoint} already has its {most} node(s) ({running} running, {waiting} more waiting "
        f"for its next round): node {name} is not taken. Hint: a larger MAX in --nnodes MIN:MAX on every "
        "node, or another --rdzv port for another job."
    )


def not_grown(endpoint: str, name: str, member: str, why: str) -> str:
    """The line for node ``name`` that the running job cannot take: node ``member`` said ``why``."""
    return (
        f"the job at {endpoint} cannot take node {name} while it runs: {why} (said node {member}). It "
        "takes new nodes at its next restart; start this node again then, or with the next job."
    )


def twins(endpoint: str, name: str, first: str, second: str, running: bool) -> str:
    """The line for two launchers called ``name``; ``running``: the first runs (only the second refused)."""
    said = "runs in the job" if running else "joined first"
    outcome = "was refused" if running else "second, so neither joins"
    return (
        f"two launchers call themselves {name!r} at the rendezvous {endpoint}: {first} {said}, {second} "
        f"{outcome}. A job's nodes need distinct host names. Hint: give each node its own host name "
        "(hostname, or a container's --hostname), one tfdist launch per machine, or list the nodes with "
        "--hosts."
    )


def too_few(
    endpoint: str,
    arrived: Sequence[str],
    nodes: tuple[int, int],
    timeout: float,
    gone: Sequence[str] = (),
    twins: str | None = None,
) -> str:
    """The line when a round did not gather the fewest of ``nodes`` (fewest, most) within ``timeout``."""
    fewest, most = nodes
    which = f" ({some(gone)} of the last round)" if gone else ""
    wanted = f"{fewest}" if fewest == most else f"at least {fewest}"
    refused = f" Refused meanwhile: {twins}" if twins else ""
    return (
        f"only {len(arrived)} of {wanted} node(s) arrived at the rendezvous {endpoint} within {timeout:g} s "
        f"({some(arrived) or 'none'}); {fewest - len(arrived)} missing{which}. Hint: start the same command "
        f"on every node, or raise --rdzv-timeout.{refused}"
    )


def loopback_among_remote(assignment: Assignment) -> str | None:
    """A one-line error when some node is reachable only as loopback while others are remote."""
    loop = nodes.loopback_among_remote(assignment.addresses)
    if not loop:
        return None
    name = assignment.names[assignment.addresses.index(loop[0])]
    return (
        f"node {name} reached the rendezvous through {loop[0]} (loopback), so the other nodes cannot "
        f"reach it: the endpoint's name resolves to loopback on {name}. Hint: give --rdzv the endpoint's "
        f"network address, or map its name to that address in /etc/hosts on {name}."
    )
