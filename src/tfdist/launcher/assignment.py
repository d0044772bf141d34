"""What a membership answers the launcher: the job's nodes (:class:`Assignment`) and, while the workers run,
what another node said (:class:`Notice`). Every source of :mod:`tfdist.launcher.membership` answers with
these; the rendezvous also sends them on its wire (:mod:`tfdist.launcher.rendezvous.protocol`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class Assignment:
    """The job as every node learns it: its rank and every node's address and ports, in rank order."""

    node_rank: int
    names: tuple[str, ...]
    addresses: tuple[str, ...]
    ports: tuple[tuple[int, ...], ...]
    nproc: int
    endpoint: str
    #: Which formation of the job this is: 0 at the start, one more at every restart that met again.
    round: int = 0
    #: How node ranks were given, for the summary (a rendezvous sorts the nodes by host name).
    order: str = "by host name"

    @property
    def nnodes(self) -> int:
        """How many nodes formed the job."""
        return len(self.names)

    def summary(self) -> str:
        """The job summary every node prints (the same text on each)."""
        nodes = "; ".join(
            f"node {i} {name} ({address}) ports {','.join(map(str, ports))}"
            for i, (name, address, ports) in enumerate(
                zip(self.names, self.addresses, self.ports, strict=True)
            )
        )
        again = f" (round {self.round})" if self.round else ""
        return (
            f"job of {self.nnodes} node(s) x {self.nproc} worker(s) formed at {self.endpoint}{again} (node "
            f"ranks {self.order}): {nodes}"
        )

    def to_dict(self, node_rank: int) -> dict[str, Any]:
        """The assignment sent to the node of ``node_rank``."""
        data = asdict(self)
        data["node_rank"] = node_rank
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Assignment:
        """The assignment a node received."""
        return cls(
            node_rank=int(data["node_rank"]),
            names=tuple(data["names"]),
            addresses=tuple(data["addresses"]),
            ports=tuple(tuple(int(p) for p in ports) for ports in data["ports"]),
            nproc=int(data["nproc"]),
            endpoint=str(data["endpoint"]),
            round=int(data.get("round", 0)),
        )


@dataclass(frozen=True)
class Notice:
    """What the other nodes of a running round are told when one node's workers failed or it left.

    ``stop``: that node ended the job for good (exit ``code``), else the job meets again; ``grow``: nothing
    failed, node ``by`` waits to join and the job would have ``grow`` nodes.
    """

    by: str  # the node's host name
    why: str  # one line
    stop: bool = False
    code: int = 1
    grow: int = 0

    @property
    def unannounced(self) -> bool:
        """The node went away without a word: its host or link is gone, not just its workers."""
        return self.why in (SILENT, CLOSED, ENDPOINT_GONE)

    def line(self) -> str:
        """The report line: ``node node3 left the job: its launcher's connection … closed``."""
        if self.grow:
            return f"node {self.by} waits to join: {self.why}"
        return f"node {self.by} {'ended' if self.stop else 'left'} the job: {self.why}"

    def to_dict(self) -> dict[str, Any]:
        """The message body."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Notice:
        """Parse a notice; ValueError on anything malformed."""
        try:
            grow = int(data.get("grow", 0))
            return cls(str(data["by"]), str(data["why"])[:500], bool(data["stop"]), int(data["code"]), grow)
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"malformed notice: {exc}") from None


#: Why a node whose connection timed out left (TCP keep-alive found it gone).
SILENT = "it stopped answering the rendezvous (TCP keep-alive): host or link down"
#: Why a node whose connection closed without a leave message left.
CLOSED = "its launcher's connection to the rendezvous closed (the launcher or its host is gone)"
#: Why the job ends when the launcher serving the rendezvous went away without saying so.
ENDPOINT_GONE = (
    "the launcher serving the rendezvous is gone (killed, or its host lost power); no round can follow"
)
