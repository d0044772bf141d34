"""Horovod's collectives on TensorFlow tensors, eagerly and inside ``tf.function``, over MPI.

Each collective is one ``tf.numpy_function`` (stateful, so a ``tf.function`` keeps the program's order of
collectives on every rank). Before moving data, the ranks compare what they are about to do (operation,
dtypes, shapes, root): a rank that disagrees makes EVERY rank raise Horovod's "Mismatched …" error naming
both ranks' shapes, instead of the silent hang or garbage of an MPI call with unequal buffers.

Float32 sums (gradients) go through the MPI backend's packed shared-memory all-reduce, as ``tfdist.fit``
does; other dtypes and Min/Max/Product through MPI's own reductions.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from tfdist.horovod import runtime

# Horovod's reduction constants (the values of horovod.common.basics).
Average, Sum, Adasum, Min, Max, Product = 0, 1, 2, 3, 4, 5
OP_NAMES = {Average: "Average", Sum: "Sum", Adasum: "Adasum", Min: "Min", Max: "Max", Product: "Product"}


def resolve_op(op: int | None, average: bool | None) -> int:
    """Horovod's rule: ``op`` wins, the deprecated ``average`` flag maps to Average / Sum, default Average."""
    if op is not None and average is not None:
        raise ValueError("The op parameter supersedes average. Please provide only one of them.")
    if op is None:
        op = Sum if average is False else Average
    if op == Adasum:
        raise NotImplementedError(
            "op=hvd.Adasum is not supported by tfdist's Horovod API. Hint: use op=hvd.Average (the default)."
        )
    if op not in OP_NAMES:
        raise ValueError(f"op={op!r} is not one of hvd.Average, hvd.Sum, hvd.Min, hvd.Max, hvd.Product.")
    return op


def _describe(array: np.ndarray) -> str:
    return f"{array.dtype}{list(array.shape)}"


def agree(
    kind: str, arrays: Sequence[np.ndarray], *, free_first_dim: bool = False, extra: Any = None
) -> None:
    """Raise on every rank when the ranks are not about to run the same collective on the same shapes."""
    world = runtime.world()
    if world.size == 1:
        return
    mine = (
        kind,
        extra,
        tuple((a.dtype.str, (a.shape[1:] if free_first_dim else a.shape), a.ndim) for a in arrays),
    )
    # Fast path, every call: one 8-byte digest per rank through a buffer all-gather (no pickling).
    digest = np.array(
        [int.from_bytes(hashlib.blake2b(repr(mine).encode(), digest_size=8).digest(), "little")]
    )
    digests = np.empty(world.size, dtype=digest.dtype)
    world.comm.Allgather(digest.view(np.int64), digests.view(np.int64))
    if (digests == digest[0]).all():
        return
    # Slow path, only when the ranks disagree: gather the descriptions to name them.
    everyone = world.comm.allgather((mine, [_describe(a) for a in arrays]))
    for rank, (theirs, described) in enumerate(everyone):
        if theirs == mine:
            continue
        mine_text = ", ".join(_describe(a) for a in arrays)
        if theirs[0] != kind:
            what = (
                f"Mismatched operations: rank {world.rank} did an {kind}, but rank {rank} did an {theirs[0]}"
            )
        elif theirs[1] != extra:
            what = (
                f"Mismatched {kind} arguments: rank {world.rank} passed {extra}, "
                f"but rank {rank} passed {theirs[1]}"
            )
        else:
            what = (
                f"Mismatched {kind} tensor shapes: rank {world.rank} sent {mine_text}, "
                f"but rank {rank} sent {', '.join(described)}"
            )
        raise ValueError(f"{what}. Every rank must call the same collectives with the same shapes, in order.")


def allreduce_arrays(
    arrays: Sequence[np.ndarray], op: int, prescale: float, postscale: float
) -> list[np.ndarray]:
    """Element-wise reduction of each array over all ranks (NumPy in, NumPy out)."""
    world = runtime.world()
    agree("ALLREDUCE", arrays, extra=(op, prescale, postscale))
    scaled = [a * a.dtype.type(prescale) if prescale != 1.0 else a for a in arrays]
    factor = postscale / world.size if op == Average else postscale
    if world.size > 1 and op in (Sum, Average) and all(a.dtype == np.float32 for a in arrays):
        # One packed all-reduce; its results are views of shared memory (the next call overwrites them),
        # so the scaling pass that follows is also the copy the caller keeps: one pass over the data.
        views = world.float_sync().allreduce(scaled, keep=len(scaled))
        return [v * np.float32(factor) if factor != 1.0 else v.copy() for v in views]
    if world.size == 1:
        out = [np.array(a, copy=True) for a in scaled]
    elif op in (Sum, Average) and all(a.dtype == np.float16 for a in arrays):
        # Summed in float32, rounded back once (Horovod's float16 sums also add in float32).
        summed = world.float_sync().allreduce([a.astype(np.float32) for a in scaled])
        out = [s.astype(np.float16) for s in summed]
    else:
        mpi_op = {Sum: world.mpi.SUM, Average: world.mpi.SUM, Min: world.mpi.MIN, Max: world.mpi.MAX}
        mpi_op[Product] = world.mpi.PROD
        out = []
        for a in scaled:
            result = np.empty_like(np.ascontiguousarray(a))
            world.comm.Allreduce(np.ascontiguousarray(a), result, op=mpi_op[op])
            out.append(result)
    if factor != 1.0:
        out = [_scale(r, factor) for r in out]
    return out


def _scale(array: np.ndarray, factor: float) -> np.ndarray:
    if np.issubdtype(array.dtype, np.integer):
        return (array * factor).astype(array.dtype)  # Horovod's integer averages truncate too
    return array * array.dtype.type(factor)


def allgather_array(array: np.ndarray) -> np.ndarray:
    """Every rank's array concatenated along the first axis, in rank order (first dims may differ)."""
    world = runtime.world()
    if array.ndim == 0:
        raise ValueError(
            "hvd.allgather needs a tensor with at least one dimension (it concatenates on axis 0)."
        )
    agree("ALLGATHER", [array], free_first_dim=True)
    if world.size == 1:
        return np.array(array, copy=True)
    return np.concatenate(world.comm.allgather(np.ascontiguousarray(array)), axis=0)


def broadcast_arrays(arrays: Sequence[np.ndarray], root_rank: int) -> list[np.ndarray]:
    """The root's arrays, on every rank (one message: packed by dtype)."""
    world = runtime.world()
    if not 0 <= root_rank < world.size:
        raise ValueError(f"root_rank={root_rank} is not a rank of this job (size {world.size}).")
    agree("BROADCAST", arrays, extra=root_rank)
    if world.size == 1:
        return [np.array(a, copy=True) for a in arrays]
    out = []
    for a in arrays:
        buffer = np.array(a, copy=True, order="C")
        world.comm.Bcast(buffer, root=root_rank)
        out.append(buffer)
    return out


def alltoall_array(array: np.ndarray, splits: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """Send ``splits[r]`` leading rows to rank r; receive each rank's rows for this rank, in rank order."""
    world = runtime.world()
    if splits is None:
        if array.shape[0] % world.size:
            raise ValueError(
                f"hvd.alltoall without splits needs a first dimension divisible by the size ({world.size}); "
                f"got {array.shape[0]}."
            )
        splits = np.full(world.size, array.shape[0] // world.size, dtype=np.int32)
    splits = np.asarray(splits).astype(np.int64)
    if splits.shape != (world.size,) or splits.sum() != array.shape[0] or (splits < 0).any():
        raise ValueError(
            f"hvd.alltoall: splits {splits.tolist()} must be {world.size} counts >= 0 summing to "
            f"the first dimension {array.shape[0]}."
        )
    agree("ALLTOALL", [array], free_first_dim=True)
    if world.size == 1:
        return np.array(array, copy=True), splits.astype(np.int32)
    pieces = np.split(array, np.cumsum(splits)[:-1], axis=0)
    received = world.comm.alltoall([np.ascontiguousarray(p) for p in pieces])
    counts = np.array([r.shape[0] for r in received], dtype=np.int32)
    return np.concatenate(received, axis=0), counts


def graph(fn: Any, inputs: Sequence[Any], dtypes: Sequence[Any], shapes: Sequence[Any]) -> list[Any]:
    """``fn`` (NumPy arrays in, a list of arrays out) as one stateful op of the TensorFlow graph."""
    import tensorflow as tf

    outs = tf.numpy_function(lambda *a: fn(*a), list(inputs), list(dtypes), stateful=True)
    if not isinstance(outs, list | tuple):
        outs = [outs]
    result = []
    for out, shape in zip(outs, shapes, strict=True):
        out.set_shape(shape)
        result.append(out)
    return result
