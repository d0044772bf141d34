"""The rendezvous protocol: messages, authentication and the assignment of ranks. Pure (no sockets).

One JSON object per line, each at most :data:`MAX_MESSAGE` bytes:

1. server -> node: ``{"hello": "tfdist-rdzv/1", "nonce": HEX}``
2. node -> server: ``{"join": {...}, "mac": HMAC-SHA256(token, nonce + canonical join)}``
3. server -> node, once every node arrived: ``{"assignment": {...}}``, or at any time ``{"error": LINE}``.

While the job runs, each node of a round that another may follow keeps that connection open, and:

4. node -> server, before it closes the connection: ``{"leave": {"stop": BOOL, "code": N, "why": LINE}}``
   (``stop`` false: the job ended well on that node);
5. server -> every other node of the round, once, when a node fails or leaves: ``{"notice": {...}}``
   (:class:`Notice`), so that no survivor waits out a collective timeout to learn it.

The nonce makes a recorded join useless on another connection; the token never crosses the wire.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tfdist import nodes
from tfdist.errors import ConfigError

# What a membership answers (the assignment, a notice) travels on this wire as JSON; named here too.
from tfdist.launch.assignment import CLOSED as CLOSED
from tfdist.launch.assignment import ENDPOINT_GONE as ENDPOINT_GONE
from tfdist.launch.assignment import SILENT as SILENT
from tfdist.launch.assignment import Assignment as Assignment
from tfdist.launch.assignment import Notice as Notice

VERSION = "tfdist-rdzv/1"
#: Longest line either side sends (a join with a few hundred ports fits many times over).
MAX_MESSAGE = 64 * 1024


@dataclass(frozen=True)
class JoinRequest:
    """What a node says about itself and the job it belongs to."""

    name: str  # the node's host name (ranks are assigned in the order of these names)
    nproc: int  # workers on this node (-n)
    command: str  # the job's command, for the mismatch message
    digest: str  # SHA-256 of the command and launch options every node must share
    ports: tuple[int, ...]  # free ports on this node, one per task
    pid: int

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
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"malformed join: {exc}") from None
        if not request.name or len(request.name) > 253 or request.nproc < 1:
            raise ValueError("malformed join: name or nproc")
        if not all(0 < p < 65536 for p in request.ports) or len(request.ports) > 4096:
            raise ValueError("malformed join: ports")
        return request


def leave_notice(name: str, leave: Mapping[str, Any] | None, silent: bool = False) -> Notice | None:
    """The notice for the others when node ``name`` closes its connection after ``leave`` (or without one;
    ``silent``: the connection timed out rather than closed).

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


def encode(message: Mapping[str, Any]) -> bytes:
    """One protocol line."""
    return json.dumps(message, sort_keys=True, separators=(",", ":")).encode() + b"\n"


def decode(line: bytes) -> dict[str, Any]:
    """The object of one line; ValueError when it is not a JSON object or too long."""
    if len(line) > MAX_MESSAGE:
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
    """Whether the nodes ``joined`` so far form the next round of the job now.

    ``live_members``: the nodes of the previous round whose launchers still hold their connection to the
    server (empty before the first round); ``waited``: seconds since the first node of this round joined.
    A round forms at once with ``max_nodes``, or with at least ``min_nodes`` when every live member of
    the previous round is back (survivors of a failure do not wait out a timeout), else after
    ``last_call`` seconds with at least ``min_nodes`` (a cut node holds its connection but never comes).

    Input/Output: ``(["a", "b"], ["a", "b", "c"], 2, 3, 1.0, 10.0)`` -> False (c still holds on);
    ``(["a", "b"], ["a", "b"], 2, 3, 0.0, 10.0)`` -> True (c is gone, a and b are back);
    ``(["c"], ["a", "b"], 1, 3, 60.0, 10.0)`` -> False (a and b still run: c waits for their restart).
    """
    if live_members and not set(live_members) & set(joined):
        return False  # the round runs: nodes that join now wait for its next restart
    count = len(set(joined))
    if count >= max_nodes:
        return True
    if count < min_nodes:
        return False
    if live_members and set(live_members) <= set(joined):
        return True
    return waited >= last_call


def assign(requests: Sequence[tuple[JoinRequest, str]], endpoint: str, round_: int = 0) -> Assignment:
    """Ranks for the nodes that arrived (each with the address the server saw it connect from): by host
    name, then address, so the same nodes get the same ranks whatever order they arrive in.

    The returned assignment has ``node_rank`` 0; each node's own rank is its index in ``names``.
    """
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


def loopback_among_remote(assignment: Assignment) -> str | None:
    """A one-line error when some node is reachable only as loopback while others are remote."""
    loop = nodes.loopback_among_remote(assignment.addresses)
    if loop:
        address = loop[0]
        name = assignment.names[assignment.addresses.index(address)]
        return (
            f"node {name} reached the rendezvous through {address} (loopback), so the other nodes cannot "
            f"reach it: the endpoint's name resolves to loopback on {name}. Hint: give --rdzv the endpoint's "
            f"network address, or map its name to that address in /etc/hosts on {name}."
        )
    return None
