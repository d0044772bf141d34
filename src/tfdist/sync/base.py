"""The Synchroniser protocol: how one replica step's gradients and metric sums (:mod:`tfdist.sync.step`)
meet the rest of the job. Strategy-level (TensorFlow's collectives: the strategy spans every worker),
process-level (:class:`ProcessLevel`: MPI, Horovod; each process runs a one-device strategy and ONE packed
all-reduce per step sums everything), or asynchronous (the parameter servers: nothing is summed).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np


class Synchroniser(Protocol):
    """How one replica step's gradients and metric sums are combined across the job."""

    #: The backend name (``tf``, ``mpi``, ``horovod``, ``ps``), as reported in a run's summary.
    name: str
    #: Whether the train step may be compiled by XLA (process-level all-reduces run outside the graph).
    jit_ok: bool

    @property
    def processes(self) -> tuple[int, int]:
        """(index, count) of the processes that split each global batch beyond the strategy itself."""
        ...

    def regularization(self, total: Any) -> Any:
        """The share of the model's regularisation losses one replica adds to its loss, so the gradients
        summed over every replica count them once."""
        ...

    def exchange(self, grads: list[Any], sums: Any) -> tuple[list[Any], Any]:
        """One replica's gradients and metric sums -> what ``apply_gradients`` receives and what the step
        returns (inside the replica function, in graph mode)."""
        ...

    def exchange_sums(self, sums: Any) -> Any:
        """An evaluation step's metric sums -> what the step returns."""
        ...

    def step_total(self, value: Any) -> Any:
        """A float32 scalar summed over every replica of the job, inside the replica function (the real
        rows of a global batch made of the workers' own data)."""
        ...

    def reduce_totals(self, totals: Any) -> Any:
        """A worker's accumulated step results -> the job's (a no-op when the step already summed them)."""
        ...

    def at_sync_point(self) -> bool:
        """Called at each of the loop's sync points (the same steps on every process): True when the step
        must be traced again (the MPI backend's ``auto`` buckets just turned on)."""
        ...

    def barrier(self) -> None:
        """Return once every process got here."""
        ...

    def agree(self, flag: bool) -> bool:
        """True on every process when any process passed True (a stop one worker's callback asked for)."""
        ...

    def allgather(self, array: np.ndarray) -> np.ndarray:
        """Every process's array concatenated along the first axis, in process order."""
        ...

    def table(self, row: np.ndarray) -> np.ndarray:
        """Every worker's ``row`` (a few float64 numbers), one row per worker in rank order: what the
        workers compare at set-up (their callbacks' needs, their data's sizes) to run one schedule."""
        ...

    def broadcast_weights(self, model: Any) -> None:
        """Give every process the first process's weights (process-level backends build models apart)."""
        ...


def pack_weights(weights: Sequence[np.ndarray]) -> np.ndarray:
    """All weights as one vector of the narrowest float type that holds each of their values exactly
    (float32 for float32/float16 weights; float64 once an int32/int64 or float64 weight is among them).

    Why not always float64: the packed copy is the run's memory peak before training.

    Input/Output: ``pack_weights([np.ones(2, np.float32), np.ones(1, np.float16)]).dtype == float32``.
    """
    if not weights:
        return np.zeros(0, np.float32)
    dtype = np.result_type(*(w.dtype for w in weights))
    if not np.issubdtype(dtype, np.floating) or dtype.itemsize < 4:
        dtype = np.dtype(np.float64) if not np.issubdtype(dtype, np.floating) else np.dtype(np.float32)
    return np.concatenate([w.ravel().astype(dtype, copy=False) for w in weights])


def unpack_weights(flat: np.ndarray, like: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Inverse of :func:`pack_weights`, with the shapes and dtypes of ``like``."""
    out, offset = [], 0
    for w in like:
        out.append(flat[offset : offset + w.size].reshape(w.shape).astype(w.dtype, copy=False))
        offset += w.size
    return out


class ProcessLevel:
    """The part every process-level synchroniser shares: sums travel with the gradients, no XLA."""

    name = "process"
    jit_ok = False
    rank = 0
    size = 1

    @property
    def processes(self) -> tuple[int, int]:
        """(rank, size): each rank takes its slice of every global batch."""
        return self.rank, self.size

    def graph_allreduce(self, parts: list[Any], keep: int = 0, label: str | None = None) -> list[Any]:
        """Sum over all processes of each float32 tensor, as a step of the training graph (``label``:
        the collective as a timeout's line names it)."""
        raise NotImplementedError

    def regularization(self, total: Any) -> Any:
        """Summed over the ranks below, so each rank adds its 1/size share."""
        return total / self.size

    def exchange(self, grads: list[Any], sums: Any) -> tuple[list[Any], Any]:
        """ONE all-reduce per step: every gradient and the metric sums together."""
        import tensorflow as tf

        dense = [tf.convert_to_tensor(g) for g in grads]  # IndexedSlices become dense tensors
        *reduced, summed = self.graph_allreduce([*dense, sums], keep=len(dense))
        return [tf.cast(r, g.dtype) for r, g in zip(reduced, dense, strict=True)], summed

    def exchange_sums(self, sums: Any) -> Any:
        """Evaluation sums, summed over the ranks in the step."""
        return self.graph_allreduce([sums], label="the evaluation's metric all-reduce")[0]

    def reduce_totals(self, totals: Any) -> Any:
        """Already summed over the ranks, with the gradients."""
        return totals

    def at_sync_point(self) -> bool:
        """Nothing to decide."""
        return False

    def step_total(self, value: Any) -> Any:
        """Summed over the ranks now (each rank is one replica): one all-reduce of one float."""
        import tensorflow as tf

        (total,) = self.graph_allreduce([tf.reshape(value, [1])], label="the all-reduce of the batch's rows")
        return total[0]

    def allgather(self, array: np.ndarray, label: str = "an allgather") -> np.ndarray:
        """Every process's array concatenated along the first axis, in process order."""
        raise NotImplementedError

    def table(self, row: np.ndarray) -> np.ndarray:
        """Every rank's ``row``, in rank order (one small gather)."""
        row = np.asarray(row, np.float64).reshape(1, -1)
        return row if self.size == 1 else self.allgather(row, "the allgather of the workers' settings")

    def agree(self, flag: bool) -> bool:
        """Whether any rank passed True (one small gather; nothing to ask in a one-rank job)."""
        if self.size == 1:
            return flag
        votes = self.allgather(np.array([float(flag)], np.float32), "the allgather of the votes to stop")
        return bool(votes.sum() > 0)
