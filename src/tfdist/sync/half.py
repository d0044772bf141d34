"""The MPI backend's 16-bit wire: gradients rounded to float16 / bfloat16 where they cross nodes and added
in float32 (:mod:`tfdist.sync.wire`), for the step's one sum without buckets (:func:`exchange`) and for the
coordinator's rounds (:func:`sums_of`).

Without buckets the sum runs in the caller's thread, paired by order, not through the coordinator as one
bucket: its round cost about as much as the halved wire saved. With one rank per node, the sum's middle
(widen, add in rank order, round) runs as graph ops between two MPI ops: NumPy converts float16 one value
at a time, slowly for subnormals, and a summed gradient has many (docs/performance.md). Both middles give
the same bits (tests/tf/test_wire_casts.py).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import numpy as np

from tfdist.sync.reduce import Waiter, aligned, cross_sum_bits
from tfdist.sync.wire import decode, encode

if TYPE_CHECKING:
    from tfdist.sync.mpi import MPISync


def exchange(sync: MPISync, dense: list[Any], sums: Any) -> tuple[list[Any], Any]:
    """The gradients through the 16-bit wire and the metric sums exact, summed now in the caller's thread."""
    import tensorflow as tf

    compression = sync.options.compression
    wire = {"fp16": tf.float16, "bf16": tf.bfloat16}[compression]
    halves = [tf.cast(g, wire) for g in dense]
    if sync.half_comm is not None:
        summed, total = _in_graph(sync, halves, tf.cast(sums, tf.float32))
    else:

        def run(*arrays: np.ndarray) -> list[np.ndarray]:
            *halves, exact = arrays
            sync.watch.begin("the gradient all-reduce")
            with sync.auto.timed(sync.options.auto):
                summed = sums_of(sync, [np.asarray(h) for h in halves], compression, sync.reducer.waiter)
                (total,) = sync.packed_sum([np.asarray(exact, np.float32)])
            return [*summed, total]

        *summed, total = tf.numpy_function(
            run, [*halves, tf.cast(sums, tf.float32)], [wire] * len(dense) + [tf.float32], stateful=True
        )
    shaped = [tf.ensure_shape(o, p.shape) for o, p in zip([*summed, total], [*dense, sums], strict=True)]
    return [tf.cast(r, g.dtype) for r, g in zip(shaped[:-1], dense, strict=True)], shaped[-1]


def _in_graph(sync: MPISync, halves: list[Any], exact: Any) -> tuple[list[Any], Any]:
    """One rank per node: :func:`~tfdist.sync.reduce.cross_sum_bits` with its middle as graph ops (an
    all-to-all of the 16-bit slices, the received slices widened, added in rank order and rounded, then
    the all-gather of every rank's sum with the exact metric sums). Returns the summed 16-bit gradients
    and the sums."""
    import tensorflow as tf

    comm: Any = sync.half_comm
    waiter = sync.reducer.waiter
    size = comm.Get_size()
    wire, sizes = halves[0].dtype, [int(h.shape.num_elements()) for h in halves]
    total_size = sum(sizes)
    step = aligned(-(-total_size // size))
    flat = tf.concat([tf.reshape(h, [-1]) for h in halves], 0)
    # The padding is +0.0 in both formats; the bits travel, as the NumPy path sends them.
    bits = tf.bitcast(tf.pad(flat, [[0, step * size - total_size]]), tf.uint16)
    started: list[float] = []

    def send(sent: np.ndarray) -> np.ndarray:
        sync.watch.begin("the gradient all-reduce")
        started[:] = [time.perf_counter()]
        received = np.empty_like(sent)
        waiter.wait(comm.Ialltoall(sent, received))
        return received

    received = tf.numpy_function(send, [bits], tf.uint16, stateful=True)
    slices = tf.unstack(tf.reshape(tf.bitcast(received, wire), [size, step]))
    mine = tf.cast(slices[0], tf.float32)
    for other in slices[1:]:  # rank order, as cross_sum_bits adds them
        mine += tf.cast(other, tf.float32)
    mine_bits = tf.bitcast(tf.cast(mine, wire), tf.uint16)

    def gather(mine: np.ndarray, exact: np.ndarray) -> list[np.ndarray]:
        gathered = np.empty(step * size, np.uint16)
        waiter.wait(comm.Iallgather(mine, gathered))
        (sums,) = sync.packed_sum([np.asarray(exact, np.float32)])
        _crossed(sync, np.dtype(wire.as_numpy_dtype), 2 * total_size)
        if sync.options.auto and started:  # auto buckets time the whole sum
            sync.auto.note(started[0])
        return [gathered, sums]

    gathered, total = tf.numpy_function(gather, [mine_bits, exact], [tf.uint16, tf.float32], stateful=True)
    summed = tf.bitcast(tf.ensure_shape(gathered, [step * size])[:total_size], wire)
    pieces = tf.split(summed, sizes)
    return [tf.reshape(p, h.shape) for p, h in zip(pieces, halves, strict=True)], total


def sums_of(
    sync: MPISync, arrays: list[np.ndarray], compression: str, waiter: Waiter | None = None
) -> list[np.ndarray]:
    """Sums of 16-bit arrays (float16, or bfloat16), as arrays of the same dtype; polled by ``waiter``
    (default: the one that sleeps between polls beside a backward pass).

    One rank per node: their bits go straight to the wire. Otherwise the node's shared-memory level needs
    float32: decoded, summed as the other gradients, encoded again.
    """
    waiter = waiter or sync.background
    bits = np.concatenate([a.reshape(-1).view(np.uint16) for a in arrays])
    if sync.reducer.local_size == 1 and sync.reducer.cross.Get_size() > 1:
        with sync.reducing:
            summed = cross_sum_bits(sync.reducer.cross, bits, compression, waiter)
        _crossed(sync, arrays[0].dtype, int(bits.nbytes))
    else:
        (total,) = sync.packed_sum([decode(bits, compression)], 1, 1, compression, waiter)
        summed = encode(total, compression).view(np.uint16)
    out, at = [], 0
    for a in arrays:
        out.append(summed[at : at + a.size].view(a.dtype).reshape(a.shape))
        at += a.size
    return out


def _crossed(sync: MPISync, dtype: Any, nbytes: int) -> None:
    """Record a 16-bit sum across nodes in the reducer's counters (the timeline reads them)."""
    with sync.reducing:
        sync.reducer.wire = (dtype, nbytes)
        sync.reducer.crossed += nbytes
