"""Horovod's tensor collectives (``hvd.allreduce``, ``allgather``, ``broadcast``, ``alltoall``,
``reducescatter`` and their grouped forms) on tfdist's MPI runtime: ``horovod.tensorflow``'s signatures
and semantics, eager or inside ``tf.function``, each differentiable with Horovod's gradient."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from tfdist.horovod import collective, ops, runtime
from tfdist.horovod.compression import Compression
from tfdist.horovod.runtime import check_process_set, global_process_set


def _dense(tensor: Any) -> Any:
    import tensorflow as tf

    return tf.convert_to_tensor(tensor)  # variables are read, Keras variables converted


def _with_gradient(forward: Any, backward: Any, tensors: Sequence[Any]) -> list[Any]:
    """``forward(tensors)`` whose gradient is ``backward(tensors, outputs, grads)`` (floats only)."""
    import tensorflow as tf

    if not all(t.dtype.is_floating or t.dtype.is_complex for t in tensors):
        return list(forward(list(tensors)))

    @tf.custom_gradient
    def call(*xs: Any) -> Any:
        ys = list(forward(list(xs)))
        return ys, lambda *dys: backward(list(xs), ys, list(dys))

    return list(call(*tensors))


def _zeros_for_none(dys: list[Any], like: list[Any]) -> list[Any]:
    import tensorflow as tf

    return [
        tf.zeros_like(y) if d is None else tf.convert_to_tensor(d) for d, y in zip(dys, like, strict=True)
    ]


def _leading_dim(message: str) -> Callable[..., Any]:
    """A check that every tensor has a first dimension (else ValueError ``message``), at trace time and at
    run time (a rank known only then)."""

    def check(arrays: Sequence[Any], local: Any = None) -> Any:
        if any(np.ndim(a) == 0 if isinstance(a, np.ndarray) else a.shape.rank == 0 for a in arrays):
            raise ValueError(message)
        return local

    return check


def _free_first(tensor: Any) -> Any:
    import tensorflow as tf

    return tf.TensorShape([None]).concatenate(tensor.shape[1:]) if tensor.shape.rank else tensor.shape


def _raw_allreduce(
    tensors: Sequence[Any], op: int, prescale: float, postscale: float, name: str | None
) -> list[Any]:
    if not tensors:
        return []
    args = (op, float(prescale), float(postscale))
    return collective.run(
        ops.ALLREDUCE, tensors, [t.dtype for t in tensors], [t.shape for t in tensors], name=name, args=args
    )


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
    """The element-wise reduction of ``tensor`` over all ranks (default: the average), matched across ranks
    by ``name``; ``tf.IndexedSlices`` are allgathered, as Horovod's. The gradient: the same allreduce."""
    import tensorflow as tf

    if not isinstance(tensor, tf.IndexedSlices):
        tensor = _dense(tensor)
        name = name or collective.default_name("HorovodAllreduce", tensor)
    return grouped_allreduce(
        [tensor], average, compression=compression, op=op, prescale_factor=prescale_factor,
        postscale_factor=postscale_factor, process_set=process_set, name=name,
    )[0]  # fmt: skip


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

    check_process_set(process_set)
    op = ops.resolve_op(op, average)
    pre, post = prescale_factor, postscale_factor
    out: list[Any] = list(tensors)
    dense_at, dense, contexts = [], [], []
    for i, tensor in enumerate(tensors):
        if isinstance(tensor, tf.IndexedSlices):
            out[i] = _sparse_allreduce(tensor, op, pre, post)
            continue
        compressed, ctx = compression.compress(_dense(tensor))
        dense_at.append(i)
        dense.append(compressed)
        contexts.append(ctx)
    if dense:
        name = name or collective.default_name("HorovodGroupedAllreduce", dense[0])

        def backward(xs: list[Any], ys: list[Any], dys: list[Any]) -> list[Any]:
            return _raw_allreduce(_zeros_for_none(dys, ys), op, pre, post, None)

        reduced = _with_gradient(lambda xs: _raw_allreduce(xs, op, pre, post, name), backward, dense)
        for i, r, ctx in zip(dense_at, reduced, contexts, strict=True):
            out[i] = compression.decompress(r, ctx)
    return out


def _raw_allgather(tensors: Sequence[Any], name: str | None) -> list[Any]:
    check = _leading_dim(
        "hvd.allgather needs a tensor with at least one dimension (it concatenates on axis 0)."
    )
    check(tensors)
    dtypes, shapes = [t.dtype for t in tensors], [_free_first(t) for t in tensors]
    return collective.run(ops.ALLGATHER, tensors, dtypes, shapes, name=name, free_first_dim=True, check=check)


def grouped_allgather(
    tensors: Sequence[Any],
    name: str | None = None,
    ignore_name_scope: bool = False,
    process_set: Any = global_process_set,
) -> list[Any]:
    """:func:`allgather` of each tensor, as one collective."""
    import tensorflow as tf

    check_process_set(process_set)
    dense = [_dense(t) for t in tensors]
    if not dense:
        return []

    def backward(xs: list[Any], ys: list[Any], dys: list[Any]) -> list[Any]:
        # Horovod's gradient: this rank's rows of the averaged gradient.
        rank, size = runtime.world().rank, runtime.world().size
        grads = []
        for x, dy in zip(xs, _zeros_for_none(dys, ys), strict=True):
            (averaged,) = _raw_allreduce([dy], ops.Average, 1.0, 1.0, None)
            (rows,) = _raw_allgather([tf.shape(x, out_type=tf.int64)[:1]], None)
            # num: in a TensorFlow 1 graph the gathered row counts have no static length.
            grads.append(tf.split(averaged, rows, axis=0, num=size)[rank] if size > 1 else averaged)
        return grads

    name = name or collective.default_name("HorovodGroupedAllgather", dense[0])
    return _with_gradient(lambda xs: _raw_allgather(xs, name), backward, dense)


def allgather(
    tensor: Any,
    name: str | None = None,
    ignore_name_scope: bool = False,
    process_set: Any = global_process_set,
) -> Any:
    """Every rank's ``tensor`` concatenated on the first dimension, in rank order (first dims may differ).
    The gradient is this rank's rows of the gradient averaged over the ranks (Horovod's)."""
    tensor = _dense(tensor)
    name = name or collective.default_name("HorovodAllgather", tensor)
    return grouped_allgather([tensor], name, process_set=process_set)[0]


def _raw_broadcast(tensors: Sequence[Any], root_rank: int, name: str | None) -> list[Any]:
    size = runtime.world().size
    if not 0 <= root_rank < size:
        raise ValueError(f"root_rank={root_rank} is not a rank of this job (size {size}).")
    dtypes, shapes = [t.dtype for t in tensors], [t.shape for t in tensors]
    return collective.run(ops.BROADCAST, tensors, dtypes, shapes, name=name, args=root_rank)


def broadcast(
    tensor: Any,
    root_rank: int,
    name: str | None = None,
    ignore_name_scope: bool = False,
    process_set: Any = global_process_set,
) -> Any:
    """``root_rank``'s value of ``tensor`` on every rank. The gradient is the average of the ranks'
    gradients on the root, zero elsewhere."""
    check_process_set(process_set)
    tensor = _dense(tensor)
    name = name or collective.default_name("HorovodBroadcast", tensor)

    def backward(xs: list[Any], ys: list[Any], dys: list[Any]) -> list[Any]:
        averaged = _raw_allreduce(_zeros_for_none(dys, ys), ops.Average, 1.0, 1.0, None)
        return averaged if runtime.world().rank == root_rank else [a * 0 for a in averaged]

    return _with_gradient(lambda xs: _raw_broadcast(xs, root_rank, name), backward, [tensor])[0]


def _assign_broadcast(variables: Sequence[Any], root_rank: int, prefix: str, process_set: Any) -> list[Any]:
    """``root_rank``'s values assigned to ``variables`` (one collective): the assignments."""
    check_process_set(process_set)
    values = [_dense(v) for v in variables]
    if not values:
        return []
    received = _raw_broadcast(values, root_rank, collective.default_name(prefix, values[0]))
    return [v.assign(x) for v, x in zip(variables, received, strict=True)]


def broadcast_variables(
    variables: Sequence[Any], root_rank: int, process_set: Any = global_process_set, inplace: bool = False
) -> Any:
    """Assign ``root_rank``'s values to ``variables`` on every rank (one collective)."""
    import tensorflow as tf

    assigns = _assign_broadcast(list(variables), root_rank, "HorovodBroadcastVariables", process_set)
    return None if not assigns or tf.executing_eagerly() else tf.group(*assigns)


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

    variables = list(variables)
    assigned = _assign_broadcast(variables, root_rank, "HorovodBroadcastInplace", process_set)
    return variables if tf.executing_eagerly() else assigned


def _raw_alltoall(tensor: Any, splits: Any, name: str | None) -> list[Any]:
    import tensorflow as tf

    size = runtime.world().size
    leading = _leading_dim("hvd.alltoall needs a tensor with at least one dimension.")

    def check(arrays: list[np.ndarray], local: Any) -> Any:
        leading(arrays)
        return ops.alltoall_splits(arrays[0].shape[0], None if splits is None else local, size)

    local = tf.zeros([0], tf.int32) if splits is None else tf.cast(tf.convert_to_tensor(splits), tf.int32)
    dtypes, shapes = [tensor.dtype, tf.int32], [_free_first(tensor), [size]]
    return collective.run(
        ops.ALLTOALL, [tensor], dtypes, shapes, name=name, local=local, free_first_dim=True, check=check
    )


def alltoall(
    tensor: Any,
    splits: Any = None,
    name: str | None = None,
    ignore_name_scope: bool = False,
    process_set: Any = global_process_set,
) -> Any:
    """Send ``splits[r]`` leading rows to rank r; returns the rows received (and the received splits when
    ``splits`` was given), as Horovod does. The gradient is the reverse exchange."""
    check_process_set(process_set)
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
    import tensorflow as tf

    check_process_set(process_set)
    if op not in (ops.Sum, ops.Average):
        raise NotImplementedError("hvd.reducescatter supports op=hvd.Sum and op=hvd.Average.")
    pairs = [compression.compress(_dense(t)) for t in tensors]
    if not pairs:
        return []
    xs = [p[0] for p in pairs]
    check = _leading_dim("hvd.reducescatter needs a tensor with at least one dimension (it splits axis 0).")
    check(xs)
    name = name or collective.default_name("HorovodGroupedReducescatter", xs[0])
    args = (op, float(prescale_factor), float(postscale_factor))

    def forward(parts: list[Any]) -> list[Any]:
        shapes, dtypes = [_free_first(x) for x in parts], [x.dtype for x in parts]
        return collective.run(ops.REDUCESCATTER, parts, dtypes, shapes, name=name, args=args, check=check)

    def backward(xs: list[Any], ys: list[Any], dys: list[Any]) -> list[Any]:
        # Horovod's definition: the allgather of the gradient, times size for a sum, times the scales.
        scale = (runtime.world().size if op == ops.Sum else 1.0) * prescale_factor * postscale_factor
        grads = [d * tf.cast(scale, d.dtype) if scale != 1.0 else d for d in _zeros_for_none(dys, ys)]
        return _raw_allgather(grads, None)

    outs = _with_gradient(forward, backward, xs)
    return [compression.decompress(o, p[1]) for o, p in zip(outs, pairs, strict=True)]


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
    """The Sum or Average (default) of ``tensor`` over all ranks, split on the first dimension: rank r keeps
    its part (the first ``rows % size`` ranks one row more). The gradient is an allgather (Horovod's)."""
    tensor = _dense(tensor)
    name = name or collective.default_name("HorovodReducescatter", tensor)
    return grouped_reducescatter(
        [tensor], compression=compression, op=op, name=name, process_set=process_set,
        prescale_factor=prescale_factor, postscale_factor=postscale_factor,
    )[0]  # fmt: skip
