"""Each worker's own data, in unequal amounts: one job with the result of one process on all of it. Global
batch k is worker 0's k-th batch, then worker 1's, ...; a worker whose data ran out contributes zero-weight
rows. Every worker decides from every worker's row (``Synchroniser.table``), so all decide the same.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tfdist.errors import ConfigError

#: tf.data's cardinality for an infinite and for an unknown number of elements.
INFINITE, UNKNOWN = -1, -2


@dataclass(frozen=True)
class OwnData:
    """How the workers' own data make up the job's global batches."""

    batch: int  # rows this worker contributes to each step (the global batch / workers)
    workers: int
    # Steps per epoch: the longest worker's data, or steps_per_epoch; None: learnt in the first epoch.
    steps: int | None
    cycle: bool  # steps_per_epoch was given: each worker's data starts again when it runs out
    counts: tuple[int, ...]  # each worker's examples (NumPy) or batches (datasets), in rank order

    @property
    def global_batch(self) -> int:
        """Rows of one global batch: every worker's batch."""
        return self.batch * self.workers

    def learnt(self, steps: int) -> OwnData:
        """The same data once the first epoch told how many steps an epoch has."""
        import dataclasses

        return dataclasses.replace(self, steps=steps)

    def padding(self, examples: int) -> int:
        """Zero-weight rows after this worker's ``examples`` in one epoch's order (NumPy data)."""
        if self.cycle:  # the order repeats: only its partial last batch is padded
            return -examples % self.batch if examples else self.batch
        assert self.steps is not None  # arrays always know their length
        return self.steps * self.batch - examples


def empty_batches(spec: Any, rows: int) -> Any:
    """An endless dataset of all-padding ``(x, y, w, s)`` batches of ``rows`` rows shaped as ``spec``."""
    import tensorflow as tf

    def zeros(part: Any) -> Any:
        dims = [rows, *(1 if d is None else int(d) for d in part.shape[1:])]
        return tf.zeros(dims, part.dtype)

    return tf.data.Dataset.from_tensors(tf.nest.map_structure(zeros, spec)).repeat()


def digest(arrays: Sequence[np.ndarray]) -> tuple[float, float]:
    """A 64-bit digest of the arrays' bytes as two exact float64 halves (what the table carries)."""
    h = hashlib.blake2b(digest_size=8)
    for array in arrays:
        h.update(str((array.shape, array.dtype.str)).encode())
        h.update(np.ascontiguousarray(array).data)
    value = int.from_bytes(h.digest(), "little")
    return float(value >> 32), float(value & 0xFFFFFFFF)


def own_data(
    arrays: Sequence[np.ndarray],
    batch_size: int,
    steps_per_epoch: int | None,
    table: Callable[[np.ndarray], np.ndarray] | None,
    per_worker: bool | None,
) -> OwnData | None:
    """:class:`OwnData` for NumPy arrays when each worker's are its own (None: they are the job's)."""
    if per_worker is False or table is None:
        return None
    rows = table(np.array([len(arrays[0]), *digest(arrays)], np.float64))
    workers = len(rows)
    if workers == 1 or (per_worker is None and bool(np.all(rows == rows[0]))):
        return None
    counts = tuple(int(n) for n in rows[:, 0])
    batch = _worker_batch(batch_size, workers)
    steps = steps_per_epoch or max(-(-n // batch) for n in counts)
    if steps == 0:
        raise ConfigError("no worker holds an example to train on (every worker's arrays are empty).")
    return OwnData(batch, workers, steps, steps_per_epoch is not None, counts)


def own_dataset(
    dataset: Any,
    batch_size: int | None,
    steps_per_epoch: int | None,
    table: Callable[[np.ndarray], np.ndarray] | None,
    per_worker: bool | None,
    batch_of: Callable[[Any], int],
) -> OwnData | None:
    """:class:`OwnData` for a dataset when each worker's is its own (``per_worker`` None: auto-shard ``OFF``
    on some worker, or different numbers of batches); ``batch_of``: the rows of its batches."""
    if per_worker is False or table is None:
        return None
    import tensorflow as tf

    cardinality = int(dataset.cardinality().numpy())
    policy = dataset.options().experimental_distribute.auto_shard_policy
    off = policy == tf.data.experimental.AutoShardPolicy.OFF
    size = batch_of(dataset) if cardinality != 0 else 0
    rows = table(np.array([cardinality, float(off), size], np.float64))
    workers = len(rows)
    if workers == 1:
        return None
    cards = [int(c) for c in rows[:, 0]]
    if per_worker is None and not rows[:, 1].any() and len(set(cards)) == 1:
        return None
    batch = _agreed_batch(rows[:, 2], batch_size, workers)
    return OwnData(batch, workers, _steps(cards, steps_per_epoch), steps_per_epoch is not None, tuple(cards))


def _worker_batch(batch_size: int, workers: int) -> int:
    if batch_size < workers or batch_size % workers:
        lower = max(workers, batch_size - batch_size % workers)
        raise ConfigError(
            f"batch_size={batch_size} (the global batch) does not split over the {workers} workers whose "
            f"data are their own. Hint: use {lower} or {lower + workers}."
        )
    return batch_size // workers


def _agreed_batch(sizes: np.ndarray, batch_size: int | None, workers: int) -> int:
    """The rows each worker's dataset gives a step: the same on every worker (0: an empty dataset)."""
    declared = sorted({int(s) for s in sizes if s > 0})
    if len(declared) > 1:
        given = ", ".join(f"rank {r}: {int(s)}" for r, s in enumerate(sizes))
        raise ConfigError(
            f"the workers' own datasets are batched differently ({given}). Hint: batch each worker's dataset "
            "by its share of the global batch (global batch / workers), the same on every worker."
        )
    if batch_size is not None:
        batch = _worker_batch(batch_size, workers)
        if declared and declared[0] > batch:
            raise ConfigError(
                f"each worker's own dataset is batched by {declared[0]}, more than its share of "
                f"batch_size={batch_size} over {workers} workers ({batch}). Hint: batch it by {batch}, or "
                f"leave batch_size out (the global batch is then {declared[0]} x {workers})."
            )
        return batch
    if not declared:
        raise ConfigError("every worker's own dataset is empty: there is nothing to train on.")
    return declared[0]


def _steps(cards: list[int], steps_per_epoch: int | None) -> int | None:
    """Steps per epoch from every worker's number of batches; None when one is unknown (learnt later)."""
    if steps_per_epoch is not None:
        return steps_per_epoch
    infinite = [r for r, c in enumerate(cards) if c == INFINITE]
    if infinite:
        finite = [r for r, c in enumerate(cards) if c != INFINITE]
        where = f"rank(s) {_ranks(infinite)}" + (f" (finite on {_ranks(finite)})" if finite else "")
        raise ConfigError(
            f"the workers' own datasets are infinite on {where}: an epoch has no end. Hint: pass "
            "steps_per_epoch=N."
        )
    if UNKNOWN in cards:
        return None
    steps = max(cards)
    if steps == 0:
        raise ConfigError("every worker's own dataset is empty: there is nothing to train on.")
    return steps


def _ranks(ranks: list[int]) -> str:
    return ", ".join(map(str, ranks))
