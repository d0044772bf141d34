"""One named collective of one rank (:class:`Request`) and the lines for ranks that disagree on one."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from tfdist.sync.watch import rank_list

SUM = "SUM"  # the MPI backend's own float32 sums
ABANDON = "ABANDON"  # the kind of :meth:`tfdist.sync.coordinator.Coordinator.abandon`'s request
JOIN, JOIN_NAME = "JOIN", "join.noname"  # ``hvd.join()``'s request (Horovod's name for it)


def hash64(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")


class Request:
    """One collective of one rank: what it sends, and (once run) what it received or why it failed."""

    def __init__(
        self,
        name: str,
        kind: str,
        arrays: Sequence[np.ndarray],
        args: Any = None,
        local: Any = None,
        free_first_dim: bool = False,
    ) -> None:
        self.name, self.kind, self.arrays = name, kind, [np.asarray(a) for a in arrays]
        self.args = args  # must agree across ranks (reduce op and scales, root rank)
        self.local = local  # may differ across ranks (alltoall's splits)
        self.free_first_dim = free_first_dim  # allgather / alltoall: first dimensions may differ
        self.key = ""
        self.key_hash = 0  # 8 bytes standing for ``key`` in a round
        self.number = 0  # the rank's count of collectives when it was submitted (a timeout's line)
        self.done = threading.Event()
        self.result: list[np.ndarray] = []
        self.error: str = ""

    def signature(self) -> tuple[Any, ...]:
        """What every rank must agree on."""
        shapes = tuple(
            (a.dtype.str, a.shape[1:] if self.free_first_dim else a.shape, a.ndim) for a in self.arrays
        )
        return (self.kind, self.args, shapes)

    def digest(self) -> int:
        """8 bytes standing for :meth:`signature`."""
        return hash64(repr(self.signature()))

    def describe(self) -> str:
        """``float32[3, 4], int64[2]``: the arrays as error messages name them."""
        return ", ".join(f"{a.dtype}{list(a.shape)}" for a in self.arrays)

    def label(self) -> str:
        """The collective as a timeout's line names it: ``allreduce 'HorovodAllreduce_x_0'``,
        ``the gradient all-reduce (bucket b0)``, ``hvd.join()``."""
        if self.kind == JOIN:
            return "hvd.join()"
        if self.name.startswith("tfdist.grads"):  # the MPI backend's gradient buckets
            return f"the gradient all-reduce (bucket {self.name.rsplit('/', 1)[-1]})"
        return f"{KIND_WORDS.get(self.kind, self.kind.lower())} {self.name!r}"

    def blank(self) -> tuple[str, str, Any, list[tuple[Any, tuple[int, ...]]]]:
        """What a joined rank needs to take part with zeros: (name, kind, args, (dtype, shape) of each)."""
        return self.name, self.kind, self.args, [(a.dtype, a.shape) for a in self.arrays]


KIND_WORDS = {SUM: "all-reduce"}
JOIN_DIGEST = Request(JOIN_NAME, JOIN, []).digest()  # a rank that announces it has joined


def mismatch_message(name: str, theirs: list[tuple[str, Any, str, list[str]] | None]) -> str:
    """The error every rank raises for a key whose ranks disagree: the first rank that sent it (rank 0,
    unless it joined) against the first other rank that differs.

    ``theirs[r]`` is rank r's (kind, args, description, dtypes), None for a joined rank that did not send it.
    """
    sent = [(rank, mine) for rank, mine in enumerate(theirs) if mine is not None]
    first, (kind0, args0, desc0, dtypes0) = sent[0]
    for rank, (kind, args, desc, dtypes) in sent[1:]:
        if kind != kind0:
            what = f"Mismatched operations: rank {first} did an {kind0}, but rank {rank} did an {kind}"
        elif args != args0:
            label = "root ranks" if kind0 == "BROADCAST" else "arguments"
            what = f"Mismatched {kind0} {label}: rank {first} passed {args0}, but rank {rank} passed {args}"
        elif dtypes != dtypes0:
            what = f"Mismatched {kind0} data types: rank {first} sent {desc0}, but rank {rank} sent {desc}"
        elif desc != desc0:
            what = f"Mismatched {kind0} tensor shapes: rank {first} sent {desc0}, but rank {rank} sent {desc}"
        else:
            continue
        return (
            f"{what} (collective {name!r}). Every rank must call the same collectives with the same "
            "dtypes and shapes."
        )
    return f"Mismatched collective {name!r}: the ranks disagree."


def join_unsupported(kind: str, name: str, joined: list[int]) -> str:
    """The error of a collective other than a sum while ranks are joined (Horovod's first sentence)."""
    hint = " Specify sparse_to_dense=True if using DistributedOptimizer." if kind == "ALLGATHER" else ""
    return (
        f"{kind.capitalize()} is not supported with Join at this time.{hint} (collective {name!r}: "
        f"{rank_list(joined)} already called hvd.join(); only allreduce runs while ranks are joined.)"
    )
