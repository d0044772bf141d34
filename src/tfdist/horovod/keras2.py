"""Horovod's ``DistributedOptimizer`` for Keras 2 optimizers (``TF_USE_LEGACY_KERAS=1``: ``tf.keras`` is
the ``tf_keras`` package, its new and its legacy optimizers)."""

from __future__ import annotations

import functools
from typing import Any

from tfdist.horovod.gradients import GradientOptions, ReducingOptimizer


def keras2_optimizer_types() -> tuple[type, ...]:
    """Keras 2's optimizer base classes (tf-keras: the new and the legacy), when this process loaded
    tf-keras (``tf.keras`` under ``TF_USE_LEGACY_KERAS=1``); ``()`` otherwise (nothing is imported)."""
    import sys

    tf_keras = sys.modules.get("tf_keras")
    if tf_keras is None:
        return ()
    return (tf_keras.optimizers.Optimizer, tf_keras.optimizers.legacy.Optimizer)


@functools.cache
def keras2_distributed_class(
    base: type, options: GradientOptions, backward_passes_per_step: int, average: bool
) -> type:
    """A subclass of the Keras 2 optimizer class ``base`` whose gradients are all-reduced in
    ``compute_gradients`` (``minimize``, ``model.fit``), else in ``apply_gradients`` (a custom loop), never
    twice; ``backward_passes_per_step`` > 1: summed locally (:class:`Keras2Aggregation`), as Horovod's."""
    passes = backward_passes_per_step

    class Distributed(ReducingOptimizer, base):
        _hvd_options = options
        _hvd_reduced = False  # the gradients of this trace came reduced from compute_gradients
        _hvd_computing = False  # inside our compute_gradients (one kind's may call the other's)

        @property
        def _agg_helper(self) -> Keras2Aggregation | None:
            if passes > 1 and "_hvd_aggregation" not in self.__dict__:
                self.__dict__["_hvd_aggregation"] = Keras2Aggregation(self, passes, average)
            return self.__dict__.get("_hvd_aggregation")

        def compute_gradients(self, loss: Any, var_list: Any, tape: Any = None) -> Any:
            return self._compute_gradients(loss, var_list, None, tape)

        def _compute_gradients(
            self, loss: Any, var_list: Any, grad_loss: Any = None, tape: Any = None
        ) -> Any:
            if self._hvd_computing:  # the base class's own method called ours back: compute only
                return self._base_compute(loss, var_list, grad_loss, tape)
            self._hvd_computing = True
            try:
                pairs = list(self._base_compute(loss, var_list, grad_loss, tape))
            finally:
                self._hvd_computing = False
            variables = [v for _, v in pairs]
            self._hvd_reduced = True
            return list(zip(self._hvd_gradients([g for g, _ in pairs], variables), variables, strict=True))

        def _base_compute(self, loss: Any, var_list: Any, grad_loss: Any, tape: Any) -> Any:
            own: Any = super()
            if hasattr(own, "_compute_gradients"):  # the legacy optimizers
                return own._compute_gradients(loss, var_list, grad_loss=grad_loss, tape=tape)
            return own.compute_gradients(loss, var_list, tape=tape)

        def _hvd_gradients(self, grads: list[Any], variables: list[Any]) -> list[Any]:
            helper = self._agg_helper
            if helper is None:
                return self._hvd_reduce(grads, variables)
            return helper.compute_gradients(grads, variables)

        def apply_gradients(self, grads_and_vars: Any, *args: Any, **kwargs: Any) -> Any:
            import tensorflow as tf

            pairs = list(grads_and_vars)
            variables = [v for _, v in pairs]
            if not self._hvd_reduced:
                pairs = list(
                    zip(self._hvd_gradients([g for g, _ in pairs], variables), variables, strict=True)
                )
            self._hvd_reduced = False
            helper = self._agg_helper
            if helper is None:
                return super().apply_gradients(pairs, *args, **kwargs)

            def apply() -> Any:
                super(Distributed, self).apply_gradients(pairs, *args, **kwargs)
                return tf.constant(True)

            def count_only() -> Any:
                self.iterations.assign_add(1)  # Horovod counts every backward pass as an iteration
                return tf.constant(False)

            return tf.cond(tf.equal(helper.counter, 0), apply, count_only)

    Distributed.__name__ = Distributed.__qualname__ = base.__name__
    Distributed.__module__ = base.__module__
    return Distributed


class Keras2Aggregation:
    """Local sums of a Keras 2 optimizer's gradients over ``passes`` backward passes, all-reduced on the
    last (Horovod's ``_agg_helper``: ``counter`` is the passes summed since the last all-reduce, 0 right
    after it)."""

    def __init__(self, optimizer: Any, passes: int, average: bool) -> None:
        import tensorflow as tf

        self.optimizer, self.passes, self.average = optimizer, passes, average
        self.counter = tf.Variable(0, trainable=False, name="hvd_passes")
        self.sums: dict[int, Any] = {}  # gradient index -> its local sum (made on the first pass)

    def compute_gradients(self, grads: list[Any], variables: list[Any]) -> list[Any]:
        """The local sums so far; on every ``passes``-th call, their all-reduce (divided by ``passes``
        when averaging), and the sums cleared."""
        import tensorflow as tf

        summed: list[Any] = []
        for index, grad in enumerate(grads):
            if grad is None:
                summed.append(None)
                continue
            grad = tf.convert_to_tensor(grad)  # IndexedSlices are summed densely
            if index not in self.sums:
                with tf.init_scope():
                    self.sums[index] = tf.Variable(tf.zeros(grad.shape, grad.dtype), trainable=False)
            self.sums[index].assign_add(grad)
            summed.append(self.sums[index].read_value())
        self.counter.assign_add(1)

        def reduce_and_clear() -> list[Any]:
            reduced = self.optimizer._hvd_reduce(summed, variables)
            if self.average:
                reduced = [None if g is None else g / self.passes for g in reduced]
            with tf.control_dependencies([g for g in reduced if g is not None]):
                self.counter.assign(0)
                for total in self.sums.values():
                    total.assign(tf.zeros_like(total))
            return [tf.identity(reduced[i]) for i in present]

        present = [i for i, g in enumerate(summed) if g is not None]
        done = tf.equal(self.counter, self.passes)
        out = iter(tf.cond(done, reduce_and_clear, lambda: [summed[i] for i in present]))
        return [None if g is None else next(out) for g in summed]
