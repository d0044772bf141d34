"""What Horovod's collectives do to NumPy arrays once every rank submitted them (on the coordinator's
thread), and Horovod's reduction constants. A round's float32 sums travel together through the MPI
backend's packed shared-memory all-reduce (tensor fusion, as ``tfdist.fit``'s); the rest uses MPI itself.
"""

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
    if fused:
        _fused_sums(fused)
    halves = [r for r in requests if _fusable(r, np.float16)] if runtime.world().size > 1 else []
    if halves:
        _fused_sums(halves, half=True)
    for request in requests:
        if request in fused or request in halves:
            continue
        request.result = RUNNERS[request.kind](request)


def _fusable(request: Request, dtype: Any) -> bool:
    return (
        request.kind in (ALLREDUCE, REDUCESCATTER)
        and request.args[0] in (Sum, Average)
        and all(a.dtype == dtype for a in request.arrays)
    )


def _waiter(sync: Any) -> Any:
    """How this thread waits for the sum: polling without spinning while buckets run beside the backward
    pass (a spin would take the core TensorFlow computes on; auto: a Horovod script's buckets are on), the
    synchroniser's own waiter otherwise."""
    return sync.background if sync.overlaps or sync.options.auto else None


def _prescaled(request: Request) -> list[np.ndarray]:
    pre = request.args[1]
    return [a * a.dtype.type(pre) if pre != 1.0 else a for a in request.arrays]


def _factor(request: Request) -> float:
    op, _, post = request.args
    return post / runtime.world().size if op == Average else post


def _fused_sums(requests: list[Request], half: bool = False) -> None:
    """Every float32 sum of the round in ONE packed all-reduce (shared memory within a node). ``half``: the
    round's float16 sums (``hvd.Compression.fp16``'s tensors), exact in the float32 buffer and again on a
    16-bit wire across nodes: added in float32 and rounded to float16 once, as Horovod does."""
    world = runtime.world()
    if half:
        parts = [a.astype(np.float32) * np.float32(r.args[1]) for r in requests for a in r.arrays]
    else:
        parts = [p for r in requests for p in _prescaled(r)]
    # Views of shared memory (the next all-reduce overwrites them): the scaling pass is also the copy.
    views = parts
    if world.size > 1:
        sync = world.float_sync()
        if half:
            views = sync.packed_sum(parts, 0, len(parts), "fp16", _waiter(sync))
        else:
            views = sync.packed_sum(parts, len(parts), waiter=_waiter(sync))
    at = 0
    for request in requests:
        factor = np.float32(_factor(request))
        mine = views[at : at + len(request.arrays)]
        at += len(request.arrays)
        summed = [v * factor if factor != 1.0 else np.array(v, copy=True) for v in mine]
        if half:
            summed = [v.astype(np.float16) for v in summed]
        request.result = _scatter(request, summed) if request.kind == REDUCESCATTER else summed


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
    coordinator = world.coordinator
    mpi = world.mpi
    out = []
    for a in scaled:
        if op in (Sum, Average) and a.dtype == np.float16:
            # Summed in float32, rounded back once (Horovod's float16 sums also add in float32).
            wide = a.astype(np.float32)
            total = np.empty_like(wide)
            coordinator.comm.Allreduce(wide, total, op=mpi.SUM)
            out.append(_scale(total, factor).astype(np.float16))
            continue
        mpi_op = {Sum: mpi.SUM, Average: mpi.SUM, Min: mpi.MIN, Max: mpi.MAX, Product: mpi.PROD}[op]
        source = np.ascontiguousarray(a)
        result = np.empty_like(source)
        coordinator.comm.Allreduce(source, result, op=mpi_op)
        out.append(_scale(result, factor))
    return out


def _allreduce(request: Request) -> list[np.ndarray]:
    op, pre, post = request.args
    return reduce_arrays(request.arrays, op, pre, post)


def _scatter(request: Request, summed: list[np.ndarray]) -> list[np.ndarray]:
    world = runtime.world()
    out = []
    for array in summed:
        counts = scatter_rows(array.shape[0], world.size)
        start = sum(counts[: world.rank])
        out.append(np.array(array[start : start + counts[world.rank]], copy=True))
    return out


def _reducescatter(request: Request) -> list[np.ndarray]:
    op, pre, post = request.args
    return _scatter(request, reduce_arrays(request.arrays, op, pre, post))


def _allgather(request: Request) -> list[np.ndarray]:
    world = runtime.world()
    if world.size == 1:
        return [np.array(a, copy=True) for a in request.arrays]
    everyone = world.coordinator.comm.allgather([np.ascontiguousarray(a) for a in request.arrays])
    return [np.concatenate([theirs[i] for theirs in everyone], axis=0) for i in range(len(request.arrays))]


def _broadcast(request: Request) -> list[np.ndarray]:
    world = runtime.world()
    out = []
    for a in request.arrays:
        buffer = np.array(a, copy=True, order="C")
        if world.size > 1:
            world.coordinator.comm.Bcast(buffer, root=request.args)
        out.append(buffer)
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
    ALLREDUCE: _allreduce,
    ALLGATHER: _allgather,
    BROADCAST: _broadcast,
    ALLTOALL: _alltoall,
    REDUCESCATTER: _reducescatter,
}


def allreduce_arrays(
    arrays: Sequence[np.ndarray], op: int, prescale: float, postscale: float, name: str = "allreduce"
) -> list[np.ndarray]:
    """Element-wise reduction of NumPy arrays over all ranks, from Python (callbacks), name-matched."""
    from tfdist.horovod import collective

    return collective.run_eager(Request(name, ALLREDUCE, arrays, (op, float(prescale), float(postscale))))
