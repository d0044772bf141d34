"""Where each rank's shard of the weights lies (pure)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tfdist.errors import ConfigError


@dataclass(frozen=True)
class ShardLayout:
    """Where one rank's shard lies in the job's trainable weights (pure).

    The weights are grouped into ``buckets`` (variable indices, in the order each bucket is packed; none:
    one bucket of every variable in the model's order). Each bucket's flat elements are padded to a
    multiple of N and split into N equal slices; rank r's shard is its slice of every bucket, bucket after
    bucket. One bucket is the flat vector of every weight cut in N.

    Input/Output: ``ShardLayout((6, 3), rank=1, size=2)``: P = 9 padded to 10, shards of 5; rank 1 owns
    flat elements 5..9, i.e. ``pieces == ((0, 5, 6), (1, 0, 3))`` (variable, start, stop) and 1 padding.
    ``ShardLayout((6, 3), 1, 2, buckets=((1,), (0,)))``: slices of 2 and 3, rank 1 owns element 2 of
    variable 1 (and one padding), then elements 3..5 of variable 0:
    ``segments() == ((1, 2, 3, 0), (0, 3, 6, 2))`` (variable, start, stop, where in the shard).
    """

    sizes: tuple[int, ...]
    rank: int
    size: int
    buckets: tuple[tuple[int, ...], ...] = ()

    def __post_init__(self) -> None:
        if not self.sizes or sum(self.sizes) == 0:
            raise ConfigError(
                "shard_optimizer: the model has no trainable weights; there is nothing to shard."
            )
        if not 0 <= self.rank < self.size:
            raise ValueError(f"rank {self.rank} is not in a job of {self.size}")
        if self.buckets and sorted(i for b in self.buckets for i in b) != list(range(len(self.sizes))):
            raise ValueError(f"buckets {self.buckets} do not hold each of {len(self.sizes)} variables once")

    @property
    def total(self) -> int:
        """P: every trainable element."""
        return sum(self.sizes)

    @property
    def groups(self) -> tuple[tuple[int, ...], ...]:
        """The variables of each bucket, in packing order (one bucket of all, in order, without buckets)."""
        return self.buckets or (tuple(range(len(self.sizes))),)

    @property
    def slices(self) -> tuple[int, ...]:
        """Each bucket's elements per rank (its elements / N, rounded up)."""
        return tuple(-(-sum(self.sizes[i] for i in group) // self.size) for group in self.groups)

    @property
    def shard(self) -> int:
        """Elements per rank: its slice of every bucket."""
        return sum(self.slices)

    @property
    def padded(self) -> int:
        """Every rank's shard together: P with each bucket padded to N slices."""
        return self.shard * self.size

    def segments(self, rank: int | None = None) -> tuple[tuple[int, int, int, int], ...]:
        """(variable, start, stop, at): each run of a variable's own flat elements in the shard of
        ``rank`` (default: this layout's), with where the run starts in that shard."""
        rank = self.rank if rank is None else rank
        out, at = [], 0
        for group, width in zip(self.groups, self.slices, strict=True):
            lo, hi = rank * width, (rank + 1) * width
            start = 0  # where the variable starts in its bucket
            for index in group:
                n = self.sizes[index]
                a, b = max(lo, start), min(hi, start + n)
                if a < b:
                    out.append((index, a - start, b - start, at + a - lo))
                start += n
            at += width
        return tuple(out)

    @property
    def pieces(self) -> tuple[tuple[int, int, int], ...]:
        """(variable, start, stop) in that variable's own flat elements, for each run in this rank's shard."""
        return tuple((index, a, b) for index, a, b, _ in self.segments())

    @property
    def padding(self) -> int:
        """Zeros in this rank's shard (past the end of a bucket)."""
        return self.shard - sum(b - a for _, a, b in self.pieces)

    def unshard(self, rows: np.ndarray) -> list[np.ndarray]:
        """Every variable's flat elements from every rank's shard (``rows``: N x shard, in rank order)."""
        out = [np.empty(n, rows.dtype) for n in self.sizes]
        for rank in range(self.size):
            for index, a, b, at in self.segments(rank):
                out[index][a:b] = rows[rank, at : at + b - a]
        return out

    def own(self, flats: Sequence[np.ndarray]) -> np.ndarray:
        """This rank's shard of ``flats`` (every variable's flat elements), zeros where it is padding."""
        dtype = flats[0].dtype if flats else np.float32
        mine = np.zeros(self.shard, dtype)
        for index, a, b, at in self.segments():
            mine[at : at + b - a] = flats[index][a:b]
        return mine
