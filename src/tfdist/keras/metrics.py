"""Metric state read across workers, for the Keras releases that keep it per worker (before 3.10): the
variables are created ``synchronization="on_read"`` under a multi-worker strategy, as Keras 3.10 does
(keras-team/keras#21072), so reading one sums it over every replica of every worker.
"""

from __future__ import annotations

from typing import Any

from tfdist.keras.checks import is_multi_worker

#: The module of Keras' base metric class.
TARGET = "keras.src.metrics.metric"


def patch_metric_variables(module: Any) -> None:
    """Make ``Metric.add_variable`` create on-read variables under a multi-worker strategy (once)."""
    cls = module.Metric
    original = cls.add_variable
    if getattr(original, "__wrapped__", None) is not None:
        return

    def add_variable(self: Any, *args: Any, **kwargs: Any) -> Any:
        import tensorflow as tf

        if not tf.distribute.has_strategy() or not is_multi_worker(tf.distribute.get_strategy()):
            return original(self, *args, **kwargs)
        aggregation = kwargs.get("aggregation", args[3] if len(args) > 3 else "sum")
        mapped = {
            "sum": tf.VariableAggregation.SUM,
            "mean": tf.VariableAggregation.MEAN,
            "only_first_replica": tf.VariableAggregation.ONLY_FIRST_REPLICA,
        }.get(aggregation, tf.VariableAggregation.SUM)

        def on_read(next_creator: Any, **options: Any) -> Any:
            options.update(synchronization=tf.VariableSynchronization.ON_READ, aggregation=mapped)
            return next_creator(**options)

        with tf.variable_creator_scope(on_read):
            variable = original(self, *args, **kwargs)
        if getattr(variable, "_value", True) is None:  # deferred (built in a stateless scope): created later
            deferred = variable._deferred_initialize

            def initialize() -> None:
                with tf.variable_creator_scope(on_read):
                    deferred()

            variable._deferred_initialize = initialize
        return variable

    add_variable.__wrapped__ = original  # type: ignore[attr-defined]
    cls.add_variable = add_variable
