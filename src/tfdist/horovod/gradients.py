"""Gradient averaging for Horovod's ``DistributedGradientTape`` and ``DistributedOptimizer``: every dense
gradient of a step in ONE packed all-reduce, as ``tfdist.fit``'s MPI backend does."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tfdist.horovod import functions, ops
from tfdist.horovod.compression import Compression


@dataclass(frozen=True)
class GradientOptions:
    """How gradients are combined across ranks (Horovod's keyword arguments)."""

    op: int = ops.Average
    compression: Any = Compression.none
    sparse_as_dense: bool = False
    gradient_predivide_factor: float = 1.0

    def __post_init__(self) -> None:
        ops.resolve_op(self.op, None)  # Adasum and unknown ops: one clear error
        if self.gradient_predivide_factor != 1.0 and self.op != ops.Average:
            raise ValueError("gradient_predivide_factor not supported with op != Average")
        if self.gradient_predivide_factor <= 0:
            raise ValueError(f"gradient_predivide_factor={self.gradient_predivide_factor} must be positive.")


def allreduce_gradients(grads: list[Any], options: GradientOptions) -> list[Any]:
    """Each gradient reduced over all ranks (None stays None); dense ones packed into one all-reduce.

    With ``gradient_predivide_factor`` f, gradients are scaled by 1/f before the sum and by f/size after.
    """
    import tensorflow as tf

    f = options.gradient_predivide_factor
    prepared = [
        tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) and options.sparse_as_dense else g
        for g in grads
    ]
    present = [i for i, g in enumerate(prepared) if g is not None]
    reduced = functions.grouped_allreduce(
        [prepared[i] for i in present],
        compression=options.compression,
        op=options.op,
        prescale_factor=1.0 / f,
        postscale_factor=f,
    )
    out: list[Any] = [None] * len(grads)
    for i, g in zip(present, reduced, strict=True):
        out[i] = g
    return out


class DistributedGradientTape:
    """Wraps a ``tf.GradientTape``: ``gradient()`` returns the gradients averaged over all ranks.

    Everything else (``watch``, ``stop_recording``, ``jacobian``, …) is the wrapped tape's.
    """

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
        del device_dense, device_sparse, num_groups, groups  # one packed group: every gradient at once
        if process_set is not None:
            functions._check_process_set(process_set)
        self._tape = gradtape
        self._options = GradientOptions(op, compression, sparse_as_dense, gradient_predivide_factor)
        self._local_sources: set[Any] = set()
        self._scale_local_gradients = scale_local_gradients

    def register_local_source(self, source: Any) -> None:
        """A variable whose gradient stays local to each rank (not averaged)."""
        self._local_sources.add(source.ref() if hasattr(source, "ref") else id(source))

    def _is_local(self, source: Any) -> bool:
        return (source.ref() if hasattr(source, "ref") else id(source)) in self._local_sources

    def gradient(
        self, target: Any, sources: Any, output_gradients: Any = None, use_generic_names: bool = False
    ) -> Any:
        """The wrapped tape's gradients of ``target`` w.r.t. ``sources``, averaged over all ranks."""
        import tensorflow as tf

        del use_generic_names
        grads = self._tape.gradient(target, sources, output_gradients=output_gradients)
        flat_sources, flat_grads = tf.nest.flatten(sources), tf.nest.flatten(grads, expand_composites=False)
        shared = [i for i, s in enumerate(flat_sources) if not self._is_local(s)]
        reduced = allreduce_gradients([flat_grads[i] for i in shared], self._options)
        out = list(flat_grads)
        for i, g in zip(shared, reduced, strict=True):
            out[i] = g
        if self._scale_local_gradients and self._local_sources:
            size = float(functions.runtime.world().size)
            for i, s in enumerate(flat_sources):
                if self._is_local(s) and out[i] is not None:
                    out[i] = divided(out[i], size)
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
    import keras

    if local_layers is None:
        local_layers = []
    elif isinstance(local_layers, keras.layers.Layer):
        local_layers = [local_layers]
    elif not all(isinstance(layer, keras.layers.Layer) for layer in local_layers):
        raise ValueError("All local layers must be of tf.keras.layers.Layer type.")
    tape = DistributedGradientTape(
        gradtape,
        compression=compression,
        sparse_as_dense=sparse_as_dense,
        op=op,
        gradient_predivide_factor=gradient_predivide_factor,
        process_set=process_set,
        scale_local_gradients=scale_local_gradients,
    )
    for layer in local_layers:
        for var in layer.trainable_weights:
            tape.register_local_source(var)
    return tape


def divided(grad: Any, size: float) -> Any:
    """``grad / size``, for a sparse gradient (an embedding's ``IndexedSlices``) too."""
    import tensorflow as tf

    if isinstance(grad, tf.IndexedSlices):
        return tf.IndexedSlices(grad.values / size, grad.indices, grad.dense_shape)
    return grad / size
