"""The parameter-server synchroniser: nothing is summed; the chief schedules each step on a worker through
a ClusterCoordinator, and that step applies its one batch to the variables on the parameter servers.
"""

from __future__ import annotations

from typing import Any

import numpy as np


class ParameterServer:
    """Asynchronous steps scheduled by the chief (TensorFlow's ParameterServerStrategy)."""

    name = "tf"  # the backend: TensorFlow's own RPCs carry the variables
    jit_ok = False
    processes = (0, 1)

    def __init__(self, strategy: Any) -> None:
        import tensorflow as tf

        self.strategy = strategy
        self.coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(strategy)

    def regularization(self, total: Any) -> Any:
        """Whole: each step's gradients are one worker's, applied alone."""
        return total

    def exchange(self, grads: list[Any], sums: Any) -> tuple[list[Any], Any]:
        """Nothing to exchange: the step updates the parameter servers' variables directly."""
        return grads, sums

    def exchange_sums(self, sums: Any) -> Any:
        """Evaluation runs on the chief: its sums are the job's."""
        return sums

    def step_total(self, value: Any) -> Any:
        """One worker's batch per scheduled step: its total is the step's."""
        return value

    def reduce_totals(self, totals: Any) -> Any:
        """The steps add their sums to a variable on a parameter server: already the job's."""
        return totals

    def at_sync_point(self) -> bool:
        """Nothing to decide."""
        return False

    def schedule(self, fn: Any, args: tuple[Any, ...]) -> None:
        """Run ``fn(*args)`` on the next free worker (returns at once)."""
        self.coordinator.schedule(fn, args=args)

    def barrier(self) -> None:
        """Wait for every scheduled step to finish."""
        self.coordinator.join()

    def allgather(self, array: np.ndarray) -> np.ndarray:
        """Only the chief runs the user's code: its array is everything."""
        return array

    def table(self, row: np.ndarray) -> np.ndarray:
        """Only the chief runs the user's code: its row is the table."""
        return np.asarray(row, np.float64).reshape(1, -1)

    def agree(self, flag: bool) -> bool:
        """Only the chief runs the user's callbacks: its answer is the job's."""
        return flag

    def broadcast_weights(self, model: Any) -> None:
        """Nothing: the variables live on the parameter servers."""
        del model
