"""Horovod's TensorFlow collectives (``hvd.allreduce``, ``allgather``, ``broadcast``, …) on tfdist's MPI
runtime: same signatures and semantics as ``horovod.tensorflow``, eager or inside ``tf.function``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tfdist.horovod import collective, ops, runtime
from tfdist.horovod.compression import Compression


class ProcessSet:
    """Horovod's process sets: tfdist supports the global one (every rank)."""

    process_set_id = 0

    def size(self) -> int:
        """Ranks in the set."""
        return runtime.world().size

    def rank(self) -> int:
        """This process's rank in the set."""
        return runtime.world().rank

    def included(self) -> bool:
        """Whether this process belongs to the set."""
        return True


global_process_set = ProcessSet()


def _check_process_set(process_set: Any) -> None:
    if process_set is not global_process_set:
        raise NotImplementedError(
            "process sets other than hvd.global_process_set are not supported by tfdist's Horovod API."
        )


def _dense(tensor: Any) -> Any:
    import tensorflow as tf

    return tf.convert_to_tensor(tensor)  # variables are read, Keras variables converted


def _differentiable(tensors: Sequence[Any]) -> bool:
    return all(t.dtype.is_floating or t.dtype.is_complex for t in tensors)


def _with_gradient(forward: Any, backward: Any, tensors: Sequence[Any]) -> list[Any]:
    """``forward(tensors)`` whose gradient is ``backward(tensors, outputs, grads)`` (floats only)."""
    import tensorflow as tf

    if not _differentiable(tensors):
        return list(forward(list(tensors)))

    @tf.custom_gradient
    def call(*xs: Any) -> Any:
        ys = list(forward(list(xs)))

        def grad(*dys: Any) -> Any:
            return backward(list(xs), ys, list(dys))

        return ys, grad

    return list(call(*tensors))


def _raw_allreduce(
    tensors: Sequence[Any], op: int, prescale: float, postscale: float, name: str | None
) -> list[Any]:
    if not tensors:
        return []
    return collective.run(
        ops.ALLREDUCE,
        tensors,
        [t.dtype for t in tensors],
        [t.shape for t in tensors],
        name=name,
        args=(op, float(prescale), float(postscale)),
    )


def _reduced(
    tensors: Sequence[Any], op: int, prescale: float, postscale: float, name: str | None
) -> list[Any]:
    """Allreduce with Horovod's gradient: the allreduce of the gradient, same op and scale factors."""

    def backward(xs: list[Any], ys: list[Any], dys: list[Any]) -> list[Any]:
        return _raw_allreduce(_zeros_for_none(dys, ys), op, prescale, postscale, None)

    return _with_gradient(lambda xs: _raw_allreduce(xs, op, prescale, postscale, name), backward, tensors)


def _zeros_for_none(dys: list[Any], like: list[Any]) -> list[Any]:
    import tensorflow as tf

    return [
        tf.zeros_like(y) if d is None else tf.convert_to_tensor(d) for d, y in zip(dys, like, strict=True)
    ]


def _sparse_allreduce(slices: Any, op: int, prescale: float, postscale: float) -> Any:
    """Horovod's IndexedSlices rule: allgather the values and the indices (an average divides by size)."""
    import tensorflow as tf

    if op not in (ops.Sum, ops.Average):
        raise NotImplementedError("Only Sum and Average ops are supported with tf.IndexedSlices")
    if prescale != 1.0 or postscale != 1.0:
        raise NotImplementedError("Pre/postscale_factor are not supported with tf.IndexedSlices")
    values, indices = allgather(slices.values), allgather(slices.indices)
    if op == ops.Average:
        values = values / tf.cast(runtime.world().size, values.dtype)
    return tf.IndexedSlices(values, indices, dense_shape=slices.dense_shape)


def allreduce(
    tensor: Any,
    average: bool | None = None,
    device_dense: str = "",
    device_sparse: str = "",
    compression: Any = Compression.none,
    op: int | None = None,
    prescale_factor: float = 1.0,
    postscale_factor: float = 1.0,
    name: str | None = None,
    process_set: Any = global_process_set,
    ignore_name_scope: bool = False,
) -> Any:
    """The element-wise reduction of ``tensor`` over all ranks (default: the average), matched across
    ranks by ``name`` (in a graph, Horovod's name derived from the tensor's).

    ``tf.IndexedSlices`` are allgathered (values and indices), as Horovod does. Differentiable: the
    gradient is the same allreduce of the incoming gradient.
    """
    import tensorflow as tf

    del device_dense, device_sparse, ignore_name_scope
    _check_process_set(process_set)
    op = ops.resolve_op(op, average)
    if isinstance(tensor, tf.IndexedSlices):
        return _sparse_allreduce(tensor, op, prescale_factor, postscale_factor)
    tensor = _dense(tensor)
    compressed, ctx = compression.compress(tensor)
    name = name or collective.default_name("HorovodAllreduce", tensor)
    (reduced,) = _reduced([compressed], op, prescale_factor, postscale_factor, name)
    return compression.decompress(reduced, ctx)


def grouped_allreduce(
    tensors: Sequence[Any],
    average: bool | None = None,
    device_dense: str = "",
    device_sparse: str = "",
    compression: Any = Compression.none,
    op: int | None = None,
    prescale_factor: float = 1.0,
    postscale_factor: float = 1.0,
    process_set: Any = global_process_set,
    ignore_name_scope: bool = False,
    name: str | None = None,
) -> list[Any]:
    """:func:`allreduce` of every tensor, the dense ones as ONE collective (one packed all-reduce)."""
    import tensorflow as tf

    del device_dense, device_sparse, ignore_name_scope
    _check_process_set(process_set)
    op = ops.resolve_op(op, average)
    out: list[Any] = list(tensors)
    dense_at, dense, contexts = [], [], []
    for i, tensor in enumerate(tensors):
        if isinstance(tensor, tf.IndexedSlices):
            out[i] = _sparse_allreduce(tensor, op, prescale_factor, postscale_factor)
            continue
        compressed, ctx = compression.compress(_dense(tensor))
        dense_at.append(i)
        dense.append(compressed)
        contexts.append(ctx)
    if dense:
        name = name or collective.default_name("HorovodGroupedAllreduce", dense[0])
        reduced = _reduced(dense, op, prescale_factor, postscale_factor, name)
        for i, r, ctx in zip(dense_at, reduced, contexts, strict=True):
            out[i] = compression.decompress(r, ctx)
    return out


def _raw_allgather(tensors: Sequence[Any], name: str | None) -> list[Any]:
    import tensorflow as tf

    for t in tensors:
        if t.shape.rank == 0:
            raise ValueError(
                "hvd.allgather needs a tensor with at least one dimension (it concatenates on axis 0)."
            )
    shapes = [tf.TensorShape([None]).concatenate(t.shape[1:]) if t.shape.rank else t.shape for t in tensors]

    def check(arrays: list[np.ndarray], local: Any) -> Any:
        if any(a.ndim == 0 for a in arrays):
            raise ValueError(
                "hvd.allgather needs a tensor with at least one dimension (it concatenates on axis 0)."
            )
        return local

    return collective.run(
        ops.ALLGATHER,
        tensors,
        [t.dtype for t in tensors],
        shapes,
        name=name,
        free_first_dim=True,
        check=check,
    )


def _gathered(tensors: Sequence[Any], name: str | None) -> list[Any]:
    """Allgather with Horovod's gradient: the rank's rows of the averaged gradient."""
    import tensorflow as tf

    def backward(xs: list[Any], ys: list[Any], dys: list[Any]) -> list[Any]:
        rank, size = runtime.world().rank, runtime.world().size
        grads = []
        for x, dy in zip(xs, _zeros_for_none(dys, ys), strict=True):
            (averaged,) = _raw_allreduce([dy], ops.Average, 1.0, 1.0, None)
            (rows,) = _raw_allgather([tf.shape(x, out_type=tf.int64)[:1]], None)
            # num: in a TensorFlow 1 graph the gathered row counts have no static length.
            grads.append(tf.split(averaged, rows, axis=0, num=size)[rank] if size > 1 else averaged)
        return grads

    return _with_gradient(lambda xs: _raw_allgather(xs, name), backward, tensors)


def allgather(
    tensor: Any,
    name: str | None = None,
    ignore_name_scope: bool = False,
    process_set: Any = global_process_set,
) -> Any:
    """Every rank's ``tensor`` concatenated on the first dimension, in rank order (first dims may differ).

    Differentiable: the gradient is this rank's rows of the gradient averaged over the ranks (Horovod's)."""
    del ignore_name_scope
    _check_process_set(process_set)
    tensor = _dense(tensor)
    return _gathered([tensor], name or collective.default_name("HorovodAllgather", tensor))[0]


def grouped_allgather(
    tensors: Sequence[Any],
    name: str | None = None,
    ignore_name_scope: bool = False,
    process_set: Any = global_process_set,
) -> list[Any]:
    """:func:`allgather` of each tensor, as one collective."""
    del ignore_name_scope
    _check_process_set(process_set)
    dense = [_dense(t) for t in tensors]
    if not dense:
        return []
    return _gathered(dense, name or collective.default_name("HorovodGroupedAllgather", dense[0]))


def _raw_broadcast(tensors: Sequence[Any], root_rank: int, name: str | None) -> list[Any]:
    size = runtime.world().size
    if not 0 <= root_rank < size:
        raise ValueError(f"root_rank={root_rank} is not a rank of this job (size {size}).")
    return collective.run(
        ops.BROADCAST,
        tensors,
        [t.dtype for t in tensors],
        [t.shape for t in tensors],
        name=name,
        args=root_rank,
    )


def broadcast(
    tensor: Any,
    root_rank: int,
    name: str | None = None,
    ignore_name_scope: bool = False,
    process_set: Any = global_process_set,
) -> Any:
    """``root_rank``'s value of ``tensor`` on every rank.

    Differentiable: the gradient is the average of the ranks' gradients on the root, zero elsewhere."""
    del ignore_name_scope
    _check_process_set(process_set)
    tensor = _dense(tensor)
    name = name or collective.default_name("HorovodBroadcast", tensor)

    def backward(xs: list[Any], ys: list[Any], dys: list[Any]) -> list[Any]:
        averaged = _raw_allreduce(_zeros_for_none(dys, ys), ops.Average, 1.0, 1.0, None)
        return averaged if runtime.world().rank == root_rank else [a * 0 for a in averaged]

    return _with_gradient(lambda xs: _raw_broadcast(xs, root_rank, name), backward, [tensor])[0]


def broadcast_variables(
    variables: Sequence[Any], root_rank: int, process_set: Any = global_process_set, inplace: bool = False
) -> Any:
    """Assign ``root_rank``'s values to ``variables`` on every rank (one collective)."""
    import tensorflow as tf

    del inplace
    _check_process_set(process_set)
    variables = list(variables)
    if not variables:
        return None
    values = [_dense(v) for v in variables]
    received = _raw_broadcast(
        values, root_rank, collective.default_name("HorovodBroadcastVariables", values[0])
    )
    assigns = [v.assign(x) for v, x in zip(variables, received, strict=True)]
    return None if tf.executing_eagerly() else tf.group(*assigns)


def broadcast_global_variables(root_rank: int) -> Any:
    """TensorFlow 1's global variables assigned ``root_rank``'s values (an op to run), in a TensorFlow 1
    graph only, as in Horovod: eagerly, RuntimeError saying to use :func:`broadcast_variables`."""
    import tensorflow as tf

    if tf.executing_eagerly():
        raise RuntimeError(
            "hvd.broadcast_global_variables() does not support eager execution. "
            "Please use `hvd.broadcast_variables(<model/optimizer variables>)` instead."
        )
    return broadcast_variables(tf.compat.v1.global_variables(), root_rank) or tf.no_op()


def broadcast_(
    variables: Sequence[Any], root_rank: int, name: str | None = None, process_set: Any = global_process_set
) -> Any:
    """Horovod's in-place broadcast: ``root_rank``'s values assigned to ``variables``; returns them
    (in a TensorFlow 1 graph, the assignments' values: evaluating them runs the broadcast)."""
    import tensorflow as tf

    del name
    _check_process_set(process_set)
    variables = list(variables)
    if not variables:
        return []
    values = [_dense(v) for v in variables]
    received = _raw_broadcast(
        values, root_rank, collective.default_name("HorovodBroadcastInplace", values[0])
    )
    assigned = [v.assign(x) for v, x in zip(variables, received, strict=True)]
    return variables if tf.executing_eagerly() else assigned


def _raw_alltoall(tensor: Any, splits: Any, name: str | None) -> list[Any]:
    import tensorflow as tf

    size = runtime.world().size
    shape = tf.TensorShape([None]).concatenate(tensor.shape[1:]) if tensor.shape.rank else tensor.shape

    def check(arrays: list[np.ndarray], local: Any) -> Any:
        if arrays[0].ndim == 0:
            raise ValueError("hvd.alltoall needs a tensor with at least one dimension.")
        return ops.alltoall_splits(arrays[0].shape[0], local, size)

    local = tf.zeros([0], tf.int32) if splits is None else tf.cast(tf.convert_to_tensor(splits), tf.int32)

    def check_or_even(arrays: list[np.ndarray], local_value: Any) -> Any:
        return check(arrays, None if splits is None else local_value)

    return collective.run(
        ops.ALLTOALL,
        [tensor],
        [tensor.dtype, tf.int32],
        [shape, [size]],
        name=name,
        local=local,
        free_first_dim=True,
        check=check_or_even,
    )


def alltoall(
    tensor: Any,
    splits: Any = None,
    name: str | None = None,
    ignore_name_scope: bool = False,
    process_set: Any = global_process_set,
) -> Any:
    """Send ``splits[r]`` leading rows to rank r; returns the rows received (and the received splits when
    ``splits`` was given), as Horovod does. Differentiable: the gradient is the reverse exchange."""
    del ignore_name_scope
    _check_process_set(process_set)
    tensor = _dense(tensor)
    name = name or collective.default_name("HorovodAlltoall", tensor)
    received: list[Any] = []

    def forward(xs: list[Any]) -> list[Any]:
        out, counts = _raw_alltoall(xs[0], splits, name)
        received.append(counts)
        return [out]

    def backward(xs: list[Any], ys: list[Any], dys: list[Any]) -> list[Any]:
        (dy,) = _zeros_for_none(dys, ys)
        return [_raw_alltoall(dy, received[0], None)[0]]

    (out,) = _with_gradient(forward, backward, [tensor])
    return out if splits is None else (out, received[0])


def _reducescattered(
    tensors: Sequence[Any], op: int, prescale: float, postscale: float, name: str | None
) -> list[Any]:
    import tensorflow as tf

    for t in tensors:
        if t.shape.rank == 0:
            raise ValueError(
                "hvd.reducescatter needs a tensor with at least one dimension (it splits axis 0)."
            )

    def check(arrays: list[np.ndarray], local: Any) -> Any:
        if any(a.ndim == 0 for a in arrays):
            raise ValueError(
                "hvd.reducescatter needs a tensor with at least one dimension (it splits axis 0)."
            )
        return local

    def forward(xs: list[Any]) -> list[Any]:
        shapes = [tf.TensorShape([None]).concatenate(x.shape[1:]) for x in xs]
        return collective.run(
            ops.REDUCESCATTER,
            xs,
            [x.dtype for x in xs],
            shapes,
            name=name,
            args=(op, float(prescale), float(postscale)),
            check=check,
        )

    def backward(xs: list[Any], ys: list[Any], dys: list[Any]) -> list[Any]:
        # Horovod's definition: the allgather of the gradient, times size for a sum, times the scales.
        size = runtime.world().size
        scale = (size if op == ops.Sum else 1.0) * prescale * postscale
        grads = [d * tf.cast(scale, d.dtype) if scale != 1.0 else d for d in _zeros_for_none(dys, ys)]
        return _raw_allgather(grads, None)

    return _with_gradient(forward, backward, tensors)


def reducescatter(
    tensor: Any,
    device_dense: str = "",
    compression: Any = Compression.none,
    op: int = ops.Average,
    name: str | None = None,
    process_set: Any = global_process_set,
    ignore_name_scope: bool = False,
    prescale_factor: float = 1.0,
    postscale_factor: float = 1.0,
) -> Any:
    """The reduction of ``tensor`` over all ranks, split on the first dimension: rank r keeps its part (the
    first ``rows % size`` ranks one row more). Sum or Average (the default). Differentiable (Horovod's
    gradient: an allgather)."""
    del device_dense, ignore_name_scope
    _check_process_set(process_set)
    if op not in (ops.Sum, ops.Average):
        raise NotImplementedError("hvd.reducescatter supports op=hvd.Sum and op=hvd.Average.")
    tensor = _dense(tensor)
    compressed, ctx = compression.compress(tensor)
    name = name or collective.default_name("HorovodReducescatter", tensor)
    (out,) = _reducescattered([compressed], op, prescale_factor, postscale_factor, name)
    return compression.decompress(out, ctx)


def grouped_reducescatter(
    tensors: Sequence[Any],
    device_dense: str = "",
    compression: Any = Compression.none,
    op: int = ops.Average,
    name: str | None = None,
    process_set: Any = global_process_set,
    ignore_name_scope: bool = False,
    prescale_factor: float = 1.0,
    postscale_factor: float = 1.0,
) -> list[Any]:
    """:func:`reducescatter` of every tensor, as one collective."""
    del device_dense, ignore_name_scope
    _check_process_set(process_set)
    if op not in (ops.Sum, ops.Average):
        raise NotImplementedError("hvd.grouped_reducescatter supports op=hvd.Sum and op=hvd.Average.")
    pairs = [compression.compress(_dense(t)) for t in tensors]
    if not pairs:
        return []
    name = name or collective.default_name("HorovodGroupedReducescatter", pairs[0][0])
    outs = _reducescattered([p[0] for p in pairs], op, prescale_factor, postscale_factor, name)
    return [compression.decompress(o, p[1]) for o, p in zip(outs, pairs, strict=True)]


def broadcast_object(
    obj: Any, root_rank: int = 0, session: Any = None, name: str | None = None, **_: Any
) -> Any:
    """``root_rank``'s Python object on every rank (pickled). Polled, not blocking: a rank that never
    calls it ends the job after TFDIST_COLLECTIVE_TIMEOUT with one line, as every collective does."""
    del session
    world = runtime.world()
    if world.size == 1:
        return obj
    label = f"broadcast_object {name!r}" if name else "broadcast_object"
    return world.float_sync().broadcast_object(obj, root_rank, world.comm, label)


def allgather_object(obj: Any, session: Any = None, name: str | None = None, **_: Any) -> list[Any]:
    """Every rank's Python object, in rank order (pickled; polled as :func:`broadcast_object`)."""
    del session
    world = runtime.world()
    if world.size == 1:
        return [obj]
    label = f"allgather_object {name!r}" if name else "allgather_object"
    return world.float_sync().allgather_object(obj, world.comm, label)


def join(device: str = "", process_set: Any = global_process_set) -> Any:
    """Horovod's join: this rank has no more batches. Until every rank joined, it takes part in the
    others' allreduces with zeros (an Average still divides by every rank, as Horovod's does); other
    collectives called meanwhile fail on the ranks that called them, with Horovod's message.

    Returns the rank that joined last, as an int32 scalar tensor (an op inside a ``tf.function``). Every
    collective name counts from 0 again afterwards, on every rank.
    """
    import tensorflow as tf

    del device
    _check_process_set(process_set)
    coordinator = runtime.world().coordinator
    if tf.executing_eagerly():
        return tf.constant(coordinator.join(), tf.int32)
    last = tf.numpy_function(
        lambda: np.int32(coordinator.join()), [], tf.int32, stateful=True, name="HorovodJoin"
    )
    return tf.ensure_shape(last, [])


def as_numpy(value: Any) -> np.ndarray:
    """``value`` as a NumPy array (tensors, variables, Python numbers)."""
    return np.asarray(value.numpy() if hasattr(value, "numpy") else value)
