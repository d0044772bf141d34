"""Horovod's ``DistributedOptimizer`` for Keras 3 and Keras 2 (tf-keras) optimizers: gradients really
averaged over all ranks.

Horovod's own wrapper overrides Keras 2 methods (``get_gradients``, ``_compute_gradients``) that Keras 3
never calls, so on Keras 3 it trains each rank on its own gradients. For Keras 3 this one overrides
``apply`` (what ``model.fit``'s step and ``apply_gradients`` call), reduces the gradients as
:mod:`tfdist.horovod.gradients` groups them (one packed all-reduce, or buckets across nodes), and supports
``backward_passes_per_step`` (local accumulation, one all-reduce every N steps). For Keras 2
(``TF_USE_LEGACY_KERAS=1``: ``tf.keras`` is the ``tf_keras`` package, its new and its legacy optimizers) it
overrides ``apply_gradients``, which both kinds' ``minimize`` and ``model.fit`` call.
"""

from __future__ import annotations

from typing import Any

from tfdist.horovod import functions, ops
from tfdist.horovod.compression import Compression
from tfdist.horovod.gradients import (
    GradientOptions,
    allreduce_gradients,
    divided,
    groups_option,
    layer_types,
    variable_key,
)

_CLASSES: dict[tuple[type, GradientOptions, int, bool], type] = {}


class _Reducing:
    """What every distributed optimizer class shares: its gradient options, the variables whose
    gradients stay on each rank (``PartialDistributedOptimizer``), and the reduction itself."""

    _hvd_options: GradientOptions
    _hvd_local_refs: frozenset[Any] = frozenset()
    _hvd_scale_local = True

    def register_local_var(self, var: Any) -> None:
        """A variable whose gradient stays on this rank (divided by the size unless
        ``scale_local_gradients=False``)."""
        self._hvd_local_refs = self._hvd_local_refs | {variable_key(var)}

    def _hvd_reduce(self, grads: list[Any], variables: list[Any]) -> list[Any]:
        options = self._hvd_options
        if not self._hvd_local_refs:
            return allreduce_gradients(grads, options, variables)
        local = [variable_key(v) in self._hvd_local_refs for v in variables]
        shared = allreduce_gradients(
            [g for g, is_local in zip(grads, local, strict=True) if not is_local],
            options,
            [v for v, is_local in zip(variables, local, strict=True) if not is_local],
        )
        size = float(functions.runtime.world().size)
        out, it = [], iter(shared)
        for grad, is_local in zip(grads, local, strict=True):
            if not is_local:
                out.append(next(it))
            elif grad is not None and self._hvd_scale_local:
                out.append(divided(grad, size))
            else:
                out.append(grad)
        return out


def keras2_optimizer_types() -> tuple[type, ...]:
    """Keras 2's optimizer base classes (tf-keras: the new and the legacy), when this process loaded
    tf-keras (``tf.keras`` under ``TF_USE_LEGACY_KERAS=1``); ``()`` otherwise (nothing is imported)."""
    import sys

    tf_keras = sys.modules.get("tf_keras")
    if tf_keras is None:
        return ()
    return (tf_keras.optimizers.Optimizer, tf_keras.optimizers.legacy.Optimizer)


def keras2_distributed_class(
    base: type, options: GradientOptions, backward_passes_per_step: int = 1, average: bool = False
) -> type:
    """A subclass of the Keras 2 optimizer class ``base`` whose gradients are all-reduced where Horovod's
    are: in ``compute_gradients`` / ``_compute_gradients`` (what both kinds' ``minimize``, and so
    ``model.fit``, call), else in ``apply_gradients`` (a custom loop's own gradients). Gradients that came
    through the first are not reduced again by the second.

    ``backward_passes_per_step`` > 1: gradients are summed locally (:class:`Keras2Aggregation`, Horovod's
    ``_agg_helper``) and all-reduced every that many passes; ``apply_gradients`` updates the weights on
    those passes only and counts every other pass as an iteration, as Horovod's Keras 2 optimizer does.
    """
    key = (base, options, backward_passes_per_step, average)
    if key in _CLASSES:
        return _CLASSES[key]
    passes = backward_passes_per_step

    class Distributed(_Reducing, base):
        _hvd_options = options
        _hvd_reduced = False  # the gradients of this trace came reduced from compute_gradients
        _hvd_computing = False  # inside our compute_gradients (one kind's may call the other's)

        @property
        def _agg_helper(self) -> Keras2Aggregation | None:
            if passes == 1:
                return None
            if "_hvd_aggregation" not in self.__dict__:
                self.__dict__["_hvd_aggregation"] = Keras2Aggregation(self, passes, average)
            helper: Keras2Aggregation = self.__dict__["_hvd_aggregation"]
            return helper

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
    _CLASSES[key] = Distributed
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
            return [None if g is None else tf.identity(g) for g in reduced]

        present = [i for i, g in enumerate(summed) if g is not None]

        def reduced() -> list[Any]:
            out = reduce_and_clear()
            return [out[i] for i in present]

        out = tf.cond(tf.equal(self.counter, self.passes), reduced, lambda: [summed[i] for i in present])
        result: list[Any] = [None] * len(summed)
        for i, value in zip(present, out, strict=True):
            result[i] = value
        return result


def distributed_class(
    base: type, options: GradientOptions, backward_passes_per_step: int, average_aggregated_gradients: bool
) -> type:
    """A subclass of the Keras optimizer class ``base`` that all-reduces gradients in ``apply``."""
    key = (base, options, backward_passes_per_step, average_aggregated_gradients)
    if key in _CLASSES:
        return _CLASSES[key]
    passes = backward_passes_per_step

    class Distributed(_Reducing, base):
        _hvd_options = options

        def build(self, variables: Any) -> None:
            super().build(variables)
            if passes > 1:
                import tensorflow as tf

                # Plain TensorFlow variables, not the optimizer's: a saved model keeps Keras' own
                # optimizer state and loads into a plain optimizer (or hvd.load_model's) of any
                # backward_passes_per_step.
                self._hvd_accumulators = [
                    tf.Variable(tf.zeros(v.shape, v.dtype), trainable=False, name="hvd_accumulated")
                    for v in variables
                ]
                self._hvd_passes = tf.Variable(0, dtype=tf.int64, trainable=False, name="hvd_passes")

        def apply(self, grads: Any, trainable_variables: Any = None) -> Any:
            import tensorflow as tf

            grads = list(grads)
            if passes == 1:
                variables = (
                    list(trainable_variables)
                    if trainable_variables is not None
                    else self._trainable_variables
                )
                return super().apply(self._hvd_reduce(grads, variables), trainable_variables)
            if not self.built:
                self.build(list(trainable_variables))
            variables = (
                list(trainable_variables) if trainable_variables is not None else self._trainable_variables
            )
            self._hvd_passes.assign_add(1)
            for grad, variable in zip(grads, variables, strict=True):
                if grad is not None:
                    slot = self._hvd_accumulators[self._get_variable_index(variable)]
                    slot.assign_add(tf.convert_to_tensor(grad))

            def reduce_and_apply() -> Any:
                summed = [
                    tf.convert_to_tensor(self._hvd_accumulators[self._get_variable_index(v)])
                    for v in variables
                ]
                if average_aggregated_gradients:
                    summed = [s / passes for s in summed]
                super(Distributed, self).apply(self._hvd_reduce(summed, variables), variables)
                for slot in self._hvd_accumulators:
                    slot.assign(tf.zeros_like(slot))
                self._hvd_passes.assign(0)
                return tf.constant(True)

            def accumulate_only() -> Any:
                self._iterations.assign_add(1)  # Horovod counts every backward pass as an iteration
                return tf.constant(False)

            return tf.cond(tf.equal(self._hvd_passes, passes), reduce_and_apply, accumulate_only)

    Distributed.__name__ = Distributed.__qualname__ = base.__name__
    Distributed.__module__ = base.__module__  # saved models name Keras' class: hvd.load_model re-wraps it
    _CLASSES[key] = Distributed
    return Distributed


def DistributedOptimizer(
    optimizer: Any,
    name: str | None = None,
    device_dense: str = "",
    device_sparse: str = "",
    compression: Any = Compression.none,
    sparse_as_dense: bool = False,
    gradient_predivide_factor: float = 1.0,
    op: int = ops.Average,
    backward_passes_per_step: int = 1,
    average_aggregated_gradients: bool = False,
    num_groups: int = 0,
    groups: Any = None,
    process_set: Any = None,
    scale_local_gradients: bool = True,
    **_: Any,
) -> Any:
    """``optimizer`` (a Keras 3 optimizer) as a new optimizer of the same class and config whose updates
    use gradients averaged over all ranks."""
    import keras

    del device_dense, device_sparse, scale_local_gradients
    if process_set is not None:
        functions._check_process_set(process_set)
    keras2 = isinstance(optimizer, keras2_optimizer_types())
    if not isinstance(optimizer, keras.optimizers.Optimizer) and not keras2:
        raise NotImplementedError(
            f"hvd.DistributedOptimizer got a {type(optimizer).__name__}; tfdist's Horovod API wraps Keras "
            "optimizers (keras.optimizers.*; tf.keras.optimizers.*, Keras 2's with TF_USE_LEGACY_KERAS=1). "
            "For a custom loop use hvd.DistributedGradientTape(tape)."
        )
    if backward_passes_per_step < 1:
        raise ValueError(f"backward_passes_per_step={backward_passes_per_step} must be at least 1.")
    options = GradientOptions(
        op, compression, sparse_as_dense, gradient_predivide_factor, groups_option(groups, num_groups)
    )
    if keras2:
        cls = keras2_distributed_class(
            type(optimizer), options, backward_passes_per_step, average_aggregated_gradients
        )
    else:
        cls = distributed_class(
            type(optimizer), options, backward_passes_per_step, average_aggregated_gradients
        )
    config = optimizer.get_config()
    if name:
        config["name"] = name
    return cls.from_config(config)  # type: ignore[attr-defined]


def PartialDistributedOptimizer(
    optimizer: Any,
    name: str | None = None,
    device_dense: str = "",
    device_sparse: str = "",
    compression: Any = Compression.none,
    sparse_as_dense: bool = False,
    gradient_predivide_factor: float = 1.0,
    op: int = ops.Average,
    backward_passes_per_step: int = 1,
    average_aggregated_gradients: bool = False,
    groups: Any = None,
    process_set: Any = None,
    local_layers: Any = None,
    scale_local_gradients: bool = True,
) -> Any:
    """:func:`DistributedOptimizer` whose ``local_layers``' weights keep their own gradients on each rank
    (divided by the size when ``scale_local_gradients``), as Horovod's Keras optimizer of that name."""
    if op not in (ops.Average, ops.Sum):
        raise ValueError("op currently only supports Average and Sum")
    if local_layers is None:
        local_layers = []
    elif isinstance(local_layers, layer_types()):
        local_layers = [local_layers]
    elif not all(isinstance(layer, layer_types()) for layer in local_layers):
        raise ValueError("All local layers must be of tf.keras.layers.Layer type.")
    distributed = DistributedOptimizer(
        optimizer,
        name=name,
        compression=compression,
        sparse_as_dense=sparse_as_dense,
        gradient_predivide_factor=gradient_predivide_factor,
        op=op,
        backward_passes_per_step=backward_passes_per_step,
        average_aggregated_gradients=average_aggregated_gradients,
        groups=groups,
        process_set=process_set,
    )
    distributed._hvd_scale_local = scale_local_gradients
    for layer in local_layers:
        for var in layer.trainable_weights:
            distributed.register_local_var(var)
    return distributed


def load_model(
    filepath: str,
    custom_optimizers: Any = None,
    custom_objects: dict[str, Any] | None = None,
    compression: Any = Compression.none,
    legacy_opts: bool = False,
) -> Any:
    """``keras.models.load_model`` whose optimizer comes back wrapped in :func:`DistributedOptimizer`
    (its saved state included)."""
    import keras

    del legacy_opts
    options = GradientOptions(compression=compression)
    classes = {
        c
        for c in _subclasses(keras.optimizers.Optimizer)
        if not c.__name__.startswith("_") and "_hvd_options" not in vars(c)
    }
    classes |= set(custom_optimizers or ())
    objects: dict[str, Any] = {c.__name__: distributed_class(c, options, 1, False) for c in classes}
    objects.update(custom_objects or {})
    return keras.models.load_model(filepath, custom_objects=objects)


def _subclasses(cls: type) -> set[type]:
    found: set[type] = set()
    sub: type
    for sub in cls.__subclasses__():
        found.add(sub)
        found |= _subclasses(sub)
    return found
