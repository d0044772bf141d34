"""What Horovod's collectives do to NumPy arrays once every rank submitted them, and its reduction
constants: a round's float sums travel in ONE packed all-reduce of the MPI backend, the rest through MPI."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tfdist.horovod import runtime
from tfdist.sync.request import Request

# Horovod's reduction constants (the values of horovod.common.basics).
Average, Sum, Adasum, Min, Max, Product = 0, 1, 2, 3, 4, 5
OP_NAMES = {Average: "Average", Sum: "Sum", Adasum: "Adasum", Min: "Min", Max: "Max", Product: "Product"}
ALLREDUCE, ALLGATHER, BROADCAST, ALLTOALL, REDUCESCATTER = runtime.KINDS


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


def scatter_rows(rows: int, size: int) -> list[int]:
    """Horovod's reducescatter split of ``rows``: the first ``rows % size`` ranks get one row more."""
    return [rows // size + (1 if r < rows % size else 0) for r in range(size)]


def alltoall_splits(rows: int, splits: Any, size: int) -> np.ndarray:
    """The rows sent to each rank (even split without ``splits``); ValueError naming what is wrong."""
    if splits is None:
        if rows % size:
            raise ValueError(
                f"hvd.alltoall without splits needs a first dimension divisible by the size ({size}); "
                f"got {rows}."
            )
        return np.full(size, rows // size, np.int64)
    counts = np.asarray(splits).astype(np.int64).ravel()
    if counts.shape != (size,) or counts.sum() != rows or (counts < 0).any():
        raise ValueError(
            f"hvd.alltoall: splits {counts.tolist()} must be {size} counts >= 0 summing to the first "
            f"dimension {rows}."
        )
    return counts


def execute(requests: list[Request]) -> None:
    """Run one round's requests (the same list, in the same order, on every rank)."""
    fused = [r for r in requests if _fusable(r, np.float32)]
    halves = [r for r in requests if _fusable(r, np.float16)] if runtime.world().size > 1 else []
    for group, half in ((fused, False), (halves, True)):
        if group:
            _fused_sums(group, half)
    for request in requests:
        if request not in fused and request not in halves:
            request.result = RUNNERS[request.kind](request)


def _fusable(request: Request, dtype: Any) -> bool:
    return (
        request.kind in (ALLREDUCE, REDUCESCATTER)
        and request.args[0] in (Sum, Average)
        and all(a.dtype == dtype for a in request.arrays)
    )


def _fused_sums(requests: list[Request], half: bool = False) -> None:
    """Every float32 sum of the round in ONE packed all-reduce. ``half``: the float16 sums
    (``Compression.fp16``), added in float32 (a 16-bit wire across nodes) and rounded once, as Horovod's."""
    world = runtime.world()
    parts = [
        np.multiply(a, np.float32(r.args[1]), dtype=np.float32) if half or r.args[1] != 1.0 else a
        for r in requests
        for a in r.arrays
    ]
    # Views of shared memory (the next all-reduce overwrites them): the scaling pass is also the copy.
    views = parts
    if world.size > 1:
        sync = world.float_sync()
        # Polled without spinning while buckets run beside the backward pass (a spin takes TF's core).
        waiter = sync.background if sync.overlaps or sync.options.auto else None
        n = len(parts)
        views = sync.packed_sum(parts, 0 if half else n, n if half else 0, "fp16" if half else "none", waiter)
    at = 0
    for request in requests:
        op, _, post = request.args
        factor = np.float32(post / world.size if op == Average else post)
        mine = views[at : at + len(request.arrays)]
        at += len(request.arrays)
        summed = [v * factor if factor != 1.0 else np.array(v, copy=True) for v in mine]
        if half:
            summed = [v.astype(np.float16) for v in summed]
        request.result = _scatter(summed) if request.kind == REDUCESCATTER else summed


def _scale(array: np.ndarray, factor: float) -> np.ndarray:
    if factor == 1.0:
        return array
    if np.issubdtype(array.dtype, np.integer):
        return (array * factor).astype(array.dtype)  # in float64, truncated: Horovod's integer scaling
    if array.dtype == np.float16:  # Horovod scales float16 in float32 on CPUs, then rounds once
        return (array.astype(np.float32) * np.float32(factor)).astype(np.float16)
    return (array * array.dtype.type(factor)).astype(array.dtype)


def reduce_arrays(
    arrays: Sequence[np.ndarray], op: int, prescale: float, postscale: float
) -> list[np.ndarray]:
    """Element-wise reduction over all ranks of arrays that are not fused float32 sums."""
    world = runtime.world()
    factor = postscale / world.size if op == Average else postscale
    scaled = [_scale(a, prescale) for a in arrays]
    if world.size == 1:
        return [_scale(np.array(a, copy=True), factor) for a in scaled]
    mpi = world.mpi
    mpi_op = {Sum: mpi.SUM, Average: mpi.SUM, Min: mpi.MIN, Max: mpi.MAX, Product: mpi.PROD}[op]
    out = []
    for a in scaled:
        # float16 sums add in float32 and are rounded back once, as Horovod's.
        wide = op in (Sum, Average) and a.dtype == np.float16
        source = a.astype(np.float32) if wide else np.ascontiguousarray(a)
        result = np.empty_like(source)
        world.coordinator.comm.Allreduce(source, result, op=mpi_op)
        out.append(_scale(result, factor).astype(a.dtype, copy=False))
    return out


def _scatter(summed: list[np.ndarray]) -> list[np.ndarray]:
    """This rank's rows of each array (:func:`scatter_rows`)."""
    world = runtime.world()
    out = []
    for array in summed:
        counts = scatter_rows(array.shape[0], world.size)
        start = sum(counts[: world.rank])
        out.append(np.array(array[start : start + counts[world.rank]], copy=True))
    return out


def _allgather(request: Request) -> list[np.ndarray]:
    world = runtime.world()
    if world.size == 1:
        return [np.array(a, copy=True) for a in request.arrays]
    everyone = world.coordinator.comm.allgather([np.ascontiguousarray(a) for a in request.arrays])
    return [np.concatenate([theirs[i] for theirs in everyone], axis=0) for i in range(len(request.arrays))]


def _broadcast(request: Request) -> list[np.ndarray]:
    world = runtime.world()
    out = [np.array(a, copy=True, order="C") for a in request.arrays]
    if world.size > 1:
        for buffer in out:
            world.coordinator.comm.Bcast(buffer, root=request.args)
    return out


def _alltoall(request: Request) -> list[np.ndarray]:
    world = runtime.world()
    (array,) = request.arrays
    splits = request.local
    if world.size == 1:
        return [np.array(array, copy=True), splits.astype(np.int32)]
    pieces = np.split(array, np.cumsum(splits)[:-1], axis=0)
    received = world.coordinator.comm.alltoall([np.ascontiguousarray(p) for p in pieces])
    counts = np.array([r.shape[0] for r in received], dtype=np.int32)
    return [np.concatenate(received, axis=0), counts]


RUNNERS = {
    ALLREDUCE: lambda r: reduce_arrays(r.arrays, *r.args),
    ALLGATHER: _allgather,
    BROADCAST: _broadcast,
    ALLTOALL: _alltoall,
    REDUCESCATTER: lambda r: _scatter(reduce_arrays(r.arrays, *r.args)),
}


def allreduce_arrays(
    arrays: Sequence[np.ndarray], op: int, prescale: float, postscale: float, name: str = "allreduce"
) -> list[np.ndarray]:
    """Element-wise reduction of NumPy arrays over all ranks, from Python (callbacks), name-matched."""
    from tfdist.horovod import collective

    return collective.run_eager(Request(name, ALLREDUCE, arrays, (op, float(prescale), float(postscale))))
