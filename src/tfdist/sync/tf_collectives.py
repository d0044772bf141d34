"""The TensorFlow-collectives synchroniser: the strategy spans every worker and all-reduces the gradients
inside ``apply_gradients``; the metric sums are all-reduced only when the loop reads results
(:meth:`TfCollectives.reduce_totals`): a second collective per step, even of a few floats, costs more than
the gradient one (docs/performance.md).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np


class TfCollectives:
    """Gradients through the strategy's own all-reduce; metric sums reduced at the loop's sync points."""

    name = "tf"
    jit_ok = True
    processes = (0, 1)  # the strategy itself splits each global batch over every worker

    def __init__(self, strategy: Any, world_size: int, rank: int = 0) -> None:
        self.strategy, self.world_size, self.rank = strategy, world_size, rank
        self._reduce = make_reduce(strategy)
        self._tables: Callable[[Any], Any] | None = None
        self._width = 1  # the shape of the last reduced vector: the barrier reuses its traced function

    def regularization(self, total: Any) -> Any:
        """Divided by the replicas in sync (the gradients are summed over all of them)."""
        import tensorflow as tf

        return tf.nn.scale_regularization_loss(total)

    def exchange(self, grads: list[Any], sums: Any) -> tuple[list[Any], Any]:
        """Nothing here: ``apply_gradients`` all-reduces under the strategy; sums are reduced later."""
        return grads, sums

    def exchange_sums(self, sums: Any) -> Any:
        """Nothing here: reduced with the rest of the totals."""
        return sums

    def step_total(self, value: Any) -> Any:
        """Summed over every replica of every worker (one all-reduce inside the step)."""
        import tensorflow as tf

        return tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, value)

    def reduce_totals(self, totals: Any) -> Any:
        """This worker's totals summed over all workers (one all-reduce)."""
        self._width = int(np.shape(totals)[0])
        return self._reduce(totals)

    def at_sync_point(self) -> bool:
        """Nothing to decide."""
        return False

    def barrier(self) -> None:
        """One small all-reduce every worker joins (nothing to wait for in a one-worker job)."""
        if self.world_size > 1:
            np.asarray(self._reduce(np.zeros(self._width, np.float32)))

    def agree(self, flag: bool) -> bool:
        """Whether any worker passed True: one all-reduce of the totals' width (its traced function is
        reused), nothing to ask in a one-worker job."""
        if self.world_size == 1:
            return flag
        vector = np.zeros(self._width, np.float32)
        vector[0] = float(flag)
        return bool(np.asarray(self._reduce(vector))[0] > 0)

    def table(self, row: np.ndarray) -> np.ndarray:
        """Every worker's ``row`` in rank order: each worker fills its own row of a zero table and one
        all-reduce sums them (float64: sizes and counts stay exact)."""
        row = np.asarray(row, np.float64).reshape(-1)
        if self.world_size == 1:
            return row.reshape(1, -1)
        table = np.zeros((self.world_size, row.size), np.float64)
        table[self.rank] = row
        if self._tables is None:  # its own traced function: the totals' one is not retraced for tables
            self._tables = make_reduce(self.strategy, any_length=True)
        return np.asarray(self._tables(table.reshape(-1))).reshape(self.world_size, row.size)

    def allgather(self, array: np.ndarray) -> np.ndarray:
        """The strategy gathers inside the step (``strategy.gather``); across processes there is nothing."""
        return array

    def broadcast_weights(self, model: Any) -> None:
        """Nothing: the strategy creates every replica's variables from the chief's initial values."""
        del model


def make_reduce(strategy: Any, any_length: bool = False) -> Callable[[Any], Any]:
    """A function summing a vector of per-worker totals over all workers (one all-reduce).

    Every local replica receives the worker's vector; only the first of them contributes it, so each
    worker's total is counted once. ``any_length``: traced for vectors of any length (set-up tables of
    several widths), not once per length.
    """
    import tensorflow as tf

    # One function per strategy and kind: every fit / evaluate / predict of a process reuses its traces
    # (new functions would each trace again, and TensorFlow warns of frequent retracing).
    cache: dict[bool, Callable[[Any], Any]] = strategy.__dict__.setdefault("_tfdist_reduce", {})
    if any_length in cache:
        return cache[any_length]
    try:
        local_replicas = len(strategy.extended.worker_devices)
    except RuntimeError:  # the default (no) strategy: one replica, one worker, nothing to reduce
        return lambda totals: totals

    def replica(totals: Any) -> Any:
        ctx = tf.distribute.get_replica_context()
        first = tf.equal(ctx.replica_id_in_sync_group % local_replicas, 0)
        return ctx.all_reduce(tf.distribute.ReduceOp.SUM, tf.where(first, totals, tf.zeros_like(totals)))

    @tf.function(reduce_retracing=any_length)
    def reduce(totals: Any) -> Any:
        return strategy.experimental_local_results(strategy.run(replica, args=(totals,)))[0]

    cache[any_length] = reduce
    return reduce
