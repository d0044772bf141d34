"""Keras releases before 3.8 apply the wrong gradient on several replicas: the optimizer part of the fix.
3.3-3.4 ("none") reduce nothing, so workers drift apart; 3.5-3.7 ("sum") sum unscaled gradients, a step
``replicas`` times too large. Acts only under a multi-worker collective strategy.
"""

from __future__ import annotations

from typing import Any

from tfdist.keras.checks import is_multi_worker

#: The Keras module of the TensorFlow optimizer base class.
TARGET = "keras.src.backend.tensorflow.optimizer"


def _multi_worker(optimizer: Any) -> bool:
    strategy = getattr(optimizer, "_distribution_strategy", None)
    return strategy is not None and is_multi_worker(strategy)


def patch_optimizer(module: Any, gradients: str) -> None:
    """Make ``TFOptimizer`` apply the mean gradient of all replicas of all workers (once)."""
    cls = module.TFOptimizer
    if gradients == "scaled" or getattr(cls, "_tfdist_gradients", False):
        return
    cls._tfdist_gradients = True
    if gradients == "none":
        _average_before_update(cls)
    else:
        _average_the_sum(cls)


def _average_before_update(cls: Any) -> None:
    import tensorflow as tf

    original = cls._backend_update_step

    def _backend_update_step(self: Any, grads: Any, trainable_variables: Any, learning_rate: Any) -> Any:
        context = tf.distribute.get_replica_context()
        if context is not None and _multi_worker(self):
            present = [i for i, g in enumerate(grads) if g is not None]
            reduced = context.all_reduce(tf.distribute.ReduceOp.MEAN, [grads[i] for i in present])
            grads = list(grads)
            for i, g in zip(present, reduced, strict=True):
                grads[i] = g
        return original(self, grads, trainable_variables, learning_rate)

    _backend_update_step.__wrapped__ = original  # type: ignore[attr-defined]
    cls._backend_update_step = _backend_update_step


def _scaled(grad: Any, scale: float) -> Any:
    import tensorflow as tf

    if grad is None:
        return None
    if isinstance(grad, tf.IndexedSlices):  # an embedding's sparse gradient
        return tf.IndexedSlices(
            grad.values * tf.cast(scale, grad.values.dtype), grad.indices, grad.dense_shape
        )
    return grad * tf.cast(scale, grad.dtype)


def _average_the_sum(cls: Any) -> None:
    import tensorflow as tf

    original = cls._all_reduce_sum_gradients

    def _all_reduce_sum_gradients(self: Any, grads_and_vars: Any) -> Any:
        summed = original(self, grads_and_vars)
        if tf.distribute.get_replica_context() is None or not _multi_worker(self):
            return summed
        scale = 1.0 / self._distribution_strategy.num_replicas_in_sync
        return [(_scaled(g, scale), v) for g, v in summed]

    _all_reduce_sum_gradients.__wrapped__ = original  # type: ignore[attr-defined]
    cls._all_reduce_sum_gradients = _all_reduce_sum_gradients
