"""Gradient averaging for Horovod's ``DistributedGradientTape`` and ``DistributedOptimizer``: a step's dense
gradients in ONE packed all-reduce, or across nodes in a ``tf.function`` in buckets (``TFDIST_BUCKET_MB``,
Horovod's ``groups=``) submitted as their gradients exist, overlapping the backward pass (tensor fusion)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tfdist._log import get_logger
from tfdist.horovod import functions, ops, runtime
from tfdist.horovod.compression import Compression

log = get_logger(__name__)


@dataclass(frozen=True)
class GradientOptions:
    """How gradients are combined across ranks (Horovod's keyword arguments)."""

    op: int = ops.Average
    compression: Any = Compression.none
    sparse_as_dense: bool = False
    gradient_predivide_factor: float = 1.0
    #: Horovod's ``groups``: a count (``num_groups``), a list of lists of variables, or None/0 (buckets by
    #: ``TFDIST_BUCKET_MB`` across nodes, one group within a node).
    groups: Any = None

    def __post_init__(self) -> None:
        ops.resolve_op(self.op, None)  # Adasum and unknown ops: one clear error
        if self.gradient_predivide_factor != 1.0 and self.op != ops.Average:
            raise ValueError("gradient_predivide_factor not supported with op != Average")
        if self.gradient_predivide_factor <= 0:
            raise ValueError(f"gradient_predivide_factor={self.gradient_predivide_factor} must be positive.")


def allreduce_gradients(
    grads: list[Any], options: GradientOptions, variables: Sequence[Any] | None = None
) -> list[Any]:
    """Each gradient reduced over all ranks (None stays None), a group's dense ones in one all-reduce
    (:func:`gradient_groups`; ``variables`` place ``groups=`` lists). ``gradient_predivide_factor`` f scales
    by 1/f before the sum and by f/size after."""
    import tensorflow as tf

    f = options.gradient_predivide_factor
    prepared = [
        tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) and options.sparse_as_dense else g
        for g in grads
    ]
    present = [i for i, g in enumerate(prepared) if g is not None]
    refs = None if variables is None else [variable_key(variables[i]) for i in present]
    groups = gradient_groups([prepared[i] for i in present], options.groups, refs)
    out: list[Any] = [None] * len(grads)
    # Submitted in the order the backward pass produces the gradients (the last layer's group first): a
    # tf.function runs the submits in program order, each once its own gradients exist.
    for group in groups:
        reduced = functions.grouped_allreduce(
            [prepared[present[k]] for k in group],
            compression=options.compression,
            op=options.op,
            prescale_factor=1.0 / f,
            postscale_factor=f,
        )
        for k, g in zip(group, reduced, strict=True):
            out[present[k]] = g
    return out


def reduce_shared(
    grads: list[Any], variables: Sequence[Any], options: GradientOptions, local: Any, scale_local: bool
) -> list[Any]:
    """:func:`allreduce_gradients` of every gradient but those of the ``local`` variables (keys), which
    stay on this rank, divided by the size when ``scale_local`` (Horovod's partial tape and optimizer)."""
    keep = [variable_key(v) in local for v in variables]
    shared = iter(
        allreduce_gradients(
            [g for g, k in zip(grads, keep, strict=True) if not k],
            options,
            [v for v, k in zip(variables, keep, strict=True) if not k],
        )
    )
    out = []
    for grad, kept in zip(grads, keep, strict=True):
        if not kept:
            out.append(next(shared))
        elif grad is not None and scale_local:
            out.append(divided(grad, float(runtime.world().size)))
        else:
            out.append(grad)
    return out


class ReducingOptimizer:
    """What every distributed optimizer class adds to its Keras class: the gradient options, the
    variables whose gradients stay on each rank (``PartialDistributedOptimizer``), and the reduction."""

    _hvd_options: GradientOptions
    _hvd_local_refs: frozenset[Any] = frozenset()
    _hvd_scale_local = True

    def register_local_var(self, var: Any) -> None:
        """A variable whose gradient stays on this rank (divided by the size unless
        ``scale_local_gradients=False``)."""
        self._hvd_local_refs = self._hvd_local_refs | {variable_key(var)}

    def _hvd_reduce(self, grads: list[Any], variables: list[Any]) -> list[Any]:
        return reduce_shared(grads, variables, self._hvd_options, self._hvd_local_refs, self._hvd_scale_local)


def variable_key(variable: Any) -> Any:
    """A hashable key of a variable: TensorFlow's ``ref()``, or the object's identity for a Keras 3
    variable (which has no ``ref``)."""
    return variable.ref() if hasattr(variable, "ref") else id(variable)


def gradient_groups(grads: Sequence[Any], groups: Any, refs: Sequence[Any] | None = None) -> list[list[int]]:
    """The gradients' indices in groups (one collective each), from the last variables back (the order
    backprop makes them): Horovod's explicit groups (lists of variable refs; ``refs`` names each gradient's,
    the others alone), ``num_groups`` n > 0 (consecutive), else buckets (:func:`_buckets`) or one group."""
    count = len(grads)
    if count == 0:
        return []
    if isinstance(groups, list | tuple) and groups:
        if refs is None:
            return [list(range(count))[::-1]]
        where = {ref: g for g, members in enumerate(groups) for ref in members}
        by_group: dict[Any, list[int]] = {}  # a gradient outside every group: a group of its own
        for index in range(count - 1, -1, -1):
            by_group.setdefault(where.get(refs[index], ("alone", index)), []).append(index)
        return sorted(by_group.values(), key=lambda g: -max(g))
    if isinstance(groups, int) and not isinstance(groups, bool) and groups > 0:
        import numpy as np

        split = np.array_split(np.arange(count), min(groups, count))
        return [[int(i) for i in part[::-1]] for part in split[::-1]]
    return _buckets(grads)


def _buckets(grads: Sequence[Any]) -> list[list[int]]:
    """Buckets of ``TFDIST_BUCKET_MB`` in a ``tf.function`` whose sums cross nodes; else one group."""
    import tensorflow as tf

    from tfdist.sync.wire import AUTO_MB, plan_buckets

    whole = [list(range(len(grads)))[::-1]]
    if tf.executing_eagerly():
        return whole  # every gradient exists already: nothing to overlap
    world = runtime.world()
    if world.size == 1 or world.mpi is None:
        return whole
    sync = world.float_sync()
    sizes = [g.shape.num_elements() if hasattr(g, "shape") else None for g in grads]
    # auto (the default) measures tfdist.fit's steps; a Horovod script's loop is its own: the size auto
    # turns on where buckets pay.
    size = AUTO_MB if sync.options.auto else sync.options.bucket_size
    if size <= 0 or None in sizes or any(isinstance(g, tf.IndexedSlices) for g in grads):
        return whole
    itemsize = [g.dtype.size for g in grads]
    buckets = plan_buckets([n * b for n, b in zip(sizes, itemsize, strict=True)], size * 2**20)
    if world.rank == 0 and len(buckets) > 1:
        log.info("Horovod: %d gradient(s) in %d bucket(s)", len(grads), len(buckets))
    return buckets


class DistributedGradientTape:
    """Wraps a ``tf.GradientTape``: ``gradient()`` returns the gradients averaged over all ranks; the rest
    (``watch``, ``stop_recording``, ``jacobian``, …) is the wrapped tape's."""

    def __init__(
        self,
        gradtape: Any,
        device_dense: str = "",
        device_sparse: str = "",
        compression: Any = Compression.none,
        sparse_as_dense: bool = False,
        op: int = ops.Average,
        gradient_predivide_factor: float = 1.0,
        num_groups: int = 0,
        groups: Any = None,
        process_set: Any = None,
        scale_local_gradients: bool = True,
    ) -> None:
        del device_dense, device_sparse
        if process_set is not None:
            runtime.check_process_set(process_set)
        self._tape = gradtape
        self._options = GradientOptions(
            op, compression, sparse_as_dense, gradient_predivide_factor, groups_option(groups, num_groups)
        )
        self._local_sources: set[Any] = set()
        self._scale_local_gradients = scale_local_gradients

    def register_local_source(self, source: Any) -> None:
        """A variable whose gradient stays local to each rank (not averaged)."""
        self._local_sources.add(variable_key(source))

    def _is_local(self, source: Any) -> bool:
        return variable_key(source) in self._local_sources

    def gradient(
        self, target: Any, sources: Any, output_gradients: Any = None, use_generic_names: bool = False
    ) -> Any:
        """The wrapped tape's gradients of ``target`` w.r.t. ``sources``, averaged over all ranks."""
        import tensorflow as tf

        del use_generic_names
        grads = self._tape.gradient(target, sources, output_gradients=output_gradients)
        flat_sources, flat_grads = tf.nest.flatten(sources), tf.nest.flatten(grads, expand_composites=False)
        out = reduce_shared(
            flat_grads, flat_sources, self._options, self._local_sources, self._scale_local_gradients
        )
        return tf.nest.pack_sequence_as(sources, out)

    def get_local_and_global_gradients(self, target: Any, sources: Any, output_gradients: Any = None) -> Any:
        """(local, global): lists of (variable, gradient) pairs of :meth:`gradient`, split by whether the
        variable was registered as local."""
        import tensorflow as tf

        grads = tf.nest.flatten(self.gradient(target, sources, output_gradients))
        pairs = list(zip(tf.nest.flatten(sources), grads, strict=True))
        return [p for p in pairs if self._is_local(p[0])], [p for p in pairs if not self._is_local(p[0])]

    def __enter__(self) -> DistributedGradientTape:
        self._tape.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._tape.__exit__(*exc)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._tape, name)


def local_weights(local_layers: Any) -> list[Any]:
    """The trainable weights of a partial tape's or optimizer's ``local_layers`` (a layer, a list, None):
    Keras 3 layers, or Keras 2's when this process loaded tf-keras (``TF_USE_LEGACY_KERAS=1``)."""
    import sys

    import keras

    tf_keras = sys.modules.get("tf_keras")
    types = (keras.layers.Layer,) if tf_keras is None else (keras.layers.Layer, tf_keras.layers.Layer)
    layers = [local_layers] if isinstance(local_layers, types) else list(local_layers or [])
    if not all(isinstance(layer, types) for layer in layers):
        raise ValueError("All local layers must be of tf.keras.layers.Layer type.")
    return [var for layer in layers for var in layer.trainable_weights]


def PartialDistributedGradientTape(
    gradtape: Any,
    device_dense: str = "",
    device_sparse: str = "",
    compression: Any = Compression.none,
    sparse_as_dense: bool = False,
    op: int = ops.Average,
    gradient_predivide_factor: float = 1.0,
    num_groups: int = 0,
    groups: Any = None,
    process_set: Any = None,
    local_layers: Any = None,
    scale_local_gradients: bool = True,
) -> DistributedGradientTape:
    """:class:`DistributedGradientTape` whose ``local_layers``' weights keep their own gradients (divided
    by the size when ``scale_local_gradients``), as Horovod's."""
    local = local_weights(local_layers)
    tape = DistributedGradientTape(
        gradtape,
        compression=compression,
        sparse_as_dense=sparse_as_dense,
        op=op,
        gradient_predivide_factor=gradient_predivide_factor,
        num_groups=num_groups,
        groups=groups,
        process_set=process_set,
        scale_local_gradients=scale_local_gradients,
    )
    for var in local:
        tape.register_local_source(var)
    return tape


def groups_option(groups: Any, num_groups: int) -> Any:
    """Horovod's ``groups`` (a count or lists of variables), else its deprecated ``num_groups``."""
    if groups is not None and not isinstance(groups, int | list | tuple):
        raise ValueError(
            f"groups must be a non-negative integer or a list of lists of variables, got {groups!r}"
        )
    if (isinstance(groups, int) and groups < 0) or num_groups < 0:
        raise ValueError(
            f"groups must be a non-negative integer, got {groups if groups is not None else num_groups}"
        )
    if isinstance(groups, list | tuple):  # hashable (options key the optimizer classes) and by reference
        return tuple(tuple(variable_key(v) for v in members) for members in groups)
    return groups if groups is not None else num_groups


def divided(grad: Any, size: float) -> Any:
    """``grad / size``, for a sparse gradient (an embedding's ``IndexedSlices``) too."""
    import tensorflow as tf

    if isinstance(grad, tf.IndexedSlices):
        return tf.IndexedSlices(grad.values / size, grad.indices, grad.dense_shape)
    return grad / size
