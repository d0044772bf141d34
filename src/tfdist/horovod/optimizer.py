"""Horovod's ``DistributedOptimizer`` (``PartialDistributedOptimizer``, ``load_model``) for Keras 3. Horovod's
own overrides Keras 2 methods Keras 3 never calls (each rank trains alone); this one overrides ``apply``,
with ``backward_passes_per_step``. Keras 2 (tf-keras) optimizers: :mod:`tfdist.horovod.keras2`."""

from __future__ import annotations

import functools
from typing import Any

from tfdist.horovod import ops, runtime
from tfdist.horovod.compression import Compression
from tfdist.horovod.gradients import GradientOptions, ReducingOptimizer, groups_option, local_weights
from tfdist.horovod.keras2 import keras2_distributed_class, keras2_optimizer_types


@functools.cache
def distributed_class(
    base: type, options: GradientOptions, backward_passes_per_step: int, average_aggregated_gradients: bool
) -> type:
    """A subclass of the Keras optimizer class ``base`` that all-reduces gradients in ``apply`` (one per
    arguments: call with all four positionally)."""
    passes = backward_passes_per_step

    keras2_names()

    class Distributed(ReducingOptimizer, base):
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
            given = trainable_variables is not None
            variables = list(trainable_variables) if given else self._trainable_variables
            if passes == 1:
                return super().apply(self._hvd_reduce(grads, variables), trainable_variables)
            if not self.built:
                self.build(variables)
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
    return Distributed


def keras2_names() -> None:
    """What Horovod's examples write on Keras 3 as they did on Keras 2: ``optimizer.lr`` (Keras 3 calls it
    ``learning_rate``) and ``tf.keras.backend.set_value(optimizer.lr, v)``, which on Keras 3 reads
    ``x.dtype.name`` that its own variables (whose dtype is a string) lack: a Keras 3 variable is assigned."""
    import importlib

    try:
        from keras.src.optimizers.base_optimizer import BaseOptimizer
    except ImportError:  # Keras 2 (tf-keras) alone: nothing to add
        return
    if not hasattr(BaseOptimizer, "lr"):
        BaseOptimizer.lr = property(lambda self: self.learning_rate)

    for name in ("keras.src.legacy.backend", "keras._tf_keras.keras.backend"):
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        original = module.set_value
        if getattr(original, "__wrapped__", None) is not None:
            continue

        def set_value(x: Any, value: Any, original: Any = original) -> None:
            if isinstance(getattr(x, "dtype", None), str) and hasattr(x, "assign"):
                x.assign(value)
            else:
                original(x, value)

        set_value.__wrapped__ = original  # type: ignore[attr-defined]
        setattr(module, "set_value", set_value)  # noqa: B010 (the module's attribute is not typed)


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
        runtime.check_process_set(process_set)
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
    make = keras2_distributed_class if keras2 else distributed_class
    base: type = type(optimizer)
    cls = make(base, options, backward_passes_per_step, average_aggregated_gradients)
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
    local = local_weights(local_layers)
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
    for var in local:
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
    subs: list[type] = cls.__subclasses__()
    return {found for sub in subs for found in (sub, *_subclasses(sub))}
