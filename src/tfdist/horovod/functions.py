"""Horovod's TensorFlow collectives (``hvd.allreduce``, ``allgather``, ``broadcast``, …) on tfdist's MPI
runtime: same signatures and semantics as ``horovod.tensorflow``, eager or inside ``tf.function``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tfdist.horovod import ops, runtime
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


def _grouped(tensors: Sequence[Any], op: int, prescale: float, postscale: float) -> list[Any]:
    if not tensors:
        return []
    return ops.graph(
        lambda *arrays: ops.allreduce_arrays(arrays, op, prescale, postscale),
        tensors,
        [t.dtype for t in tensors],
        [t.shape for t in tensors],
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
    """The element-wise reduction of ``tensor`` over all ranks (default: the average).

    ``tf.IndexedSlices`` are allgathered (values and indices), as Horovod does.
    """
    import tensorflow as tf

    del device_dense, device_sparse, name, ignore_name_scope
    _check_process_set(process_set)
    op = ops.resolve_op(op, average)
    if isinstance(tensor, tf.IndexedSlices):
        return _sparse_allreduce(tensor, op, prescale_factor, postscale_factor)
    compressed, ctx = compression.compress(_dense(tensor))
    (reduced,) = _grouped([compressed], op, prescale_factor, postscale_factor)
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
) -> list[Any]:
    """:func:`allreduce` of every tensor, the dense ones in ONE packed all-reduce."""
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
    for i, reduced, ctx in zip(
        dense_at, _grouped(dense, op, prescale_factor, postscale_factor), contexts, strict=True
    ):
        out[i] = compression.decompress(reduced, ctx)
    return out


def allgather(
    tensor: Any,
    name: str | None = None,
    ignore_name_scope: bool = False,
    process_set: Any = global_process_set,
) -> Any:
    """Every rank's ``tensor`` concatenated on the first dimension, in rank order (first dims may differ)."""
    import tensorflow as tf

    del name, ignore_name_scope
    _check_process_set(process_set)
    tensor = _dense(tensor)
    shape = tf.TensorShape([None]).concatenate(tensor.shape[1:]) if tensor.shape.rank else tensor.shape
    return ops.graph(lambda a: [ops.allgather_array(a)], [tensor], [tensor.dtype], [shape])[0]


def grouped_allgather(tensors: Sequence[Any], name: str | None = None, **kwargs: Any) -> list[Any]:
    """:func:`allgather` of each tensor."""
    return [allgather(t, **kwargs) for t in tensors]


def broadcast(
    tensor: Any,
    root_rank: int,
    name: str | None = None,
    ignore_name_scope: bool = False,
    process_set: Any = global_process_set,
) -> Any:
    """``root_rank``'s value of ``tensor`` on every rank."""
    del name, ignore_name_scope
    _check_process_set(process_set)
    tensor = _dense(tensor)
    return ops.graph(
        lambda a: ops.broadcast_arrays([a], root_rank), [tensor], [tensor.dtype], [tensor.shape]
    )[0]


def broadcast_variables(
    variables: Sequence[Any], root_rank: int, process_set: Any = global_process_set, inplace: bool = False
) -> Any:
    """Assign ``root_rank``'s values to ``variables`` on every rank (one message per variable, one op)."""
    import tensorflow as tf

    del inplace
    _check_process_set(process_set)
    variables = list(variables)
    if not variables:
        return None
    values = [_dense(v) for v in variables]
    received = ops.graph(
        lambda *arrays: ops.broadcast_arrays(arrays, root_rank),
        values,
        [v.dtype for v in values],
        [v.shape for v in values],
    )
    assigns = [v.assign(x) for v, x in zip(variables, received, strict=True)]
    return None if tf.executing_eagerly() else tf.group(*assigns)


def alltoall(
    tensor: Any,
    splits: Any = None,
    name: str | None = None,
    ignore_name_scope: bool = False,
    process_set: Any = global_process_set,
) -> Any:
    """Send ``splits[r]`` leading rows to rank r; returns the rows received (and the received splits when
    ``splits`` was given), as Horovod does."""
    import tensorflow as tf

    del name, ignore_name_scope
    _check_process_set(process_set)
    tensor = _dense(tensor)
    shape = tf.TensorShape([None]).concatenate(tensor.shape[1:])
    if splits is None:
        out, _ = ops.graph(
            lambda a: list(ops.alltoall_array(a, None)), [tensor], [tensor.dtype, tf.int32], [shape, [None]]
        )
        return out
    splits_t = tf.convert_to_tensor(splits)
    out, received = ops.graph(
        lambda a, s: list(ops.alltoall_array(a, s)),
        [tensor, splits_t],
        [tensor.dtype, tf.int32],
        [shape, [None]],
    )
    return out, received


def broadcast_object(
    obj: Any, root_rank: int = 0, session: Any = None, name: str | None = None, **_: Any
) -> Any:
    """``root_rank``'s Python object on every rank (pickled)."""
    del session, name
    world = runtime.world()
    return obj if world.size == 1 else world.comm.bcast(obj, root=root_rank)


def allgather_object(obj: Any, session: Any = None, name: str | None = None, **_: Any) -> list[Any]:
    """Every rank's Python object, in rank order (pickled)."""
    del session, name
    world = runtime.world()
    return [obj] if world.size == 1 else list(world.comm.allgather(obj))


def join(device: str = "", process_set: Any = global_process_set) -> Any:
    """Horovod's join (ranks with fewer batches wait for the others) is not supported here."""
    del device, process_set
    raise NotImplementedError(
        "hvd.join() (uneven numbers of batches per rank) is not supported by tfdist's Horovod API. "
        "Hint: give every rank the same number of steps: ds.shard(hvd.size(), hvd.rank()) and "
        "steps_per_epoch = examples // (batch_size * hvd.size())."
    )


def as_numpy(value: Any) -> np.ndarray:
    """``value`` as a NumPy array (tensors, variables, Python numbers)."""
    return np.asarray(value.numpy() if hasattr(value, "numpy") else value)
