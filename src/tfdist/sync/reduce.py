"""Hierarchical sum-all-reduce for the MPI backend: shared memory inside a node, MPI across nodes.

Every rank of a node packs its gradients straight into its own row of an MPI-3 shared window and sums one
chunk of all rows: one copy in and one pass of additions per element, several times faster than MPICH's
``MPI_Allreduce`` between ranks of a node (docs/guides/one-machine.md). Across nodes each rank all-reduces
only its own chunk with the ranks of the same local index (Horovod's and NCCL's two levels).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from tfdist.errors import SetupError
from tfdist.sync.watch import CHECK_S, Watch
from tfdist.sync.wire import WIRE_DTYPES, decode, encode

ALIGN_FLOATS = 16  # 64 bytes: TensorFlow's CPU alignment, below which it copies a returned array
#: How a sum is polled (:class:`Waiter`): spun for the first 5 ms (longer than a sum takes once every rank
#: is in), then 100 us sleeps while a straggler is awaited, 16 polls per wake-up.
SPIN_S, SLEEP_S, BURST = 0.005, 0.0001, 16
#: Sums beside the backward pass never spin (the core computes): a poll every 200 us.
PROGRESS_S = 0.0002


def aligned(n: int) -> int:
    """``n`` rounded up to a multiple of :data:`ALIGN_FLOATS`."""
    return -(-n // ALIGN_FLOATS) * ALIGN_FLOATS


def layout(sizes: Sequence[int]) -> tuple[list[int], int]:
    """Start of each part in the packed buffer (each on a 64-byte boundary) and the buffer's length."""
    offsets, end = [], 0
    for size in sizes:
        offsets.append(end)
        end += aligned(size)
    return offsets, end


def chunk(length: int, index: int, count: int) -> tuple[int, int]:
    """The ``index``-th of ``count`` contiguous, aligned slices of ``range(length)`` (the last may
    be short)."""
    step = aligned(-(-length // count))
    return min(index * step, length), min((index + 1) * step, length)


class Waiter:
    """Completes MPI requests without stealing the core a neighbouring rank computes on.

    MPICH busy-polls inside blocking calls and has no yield-when-idle setting, and MPI progresses only
    while polled: a tight poll for ``spin_s``, then sleeps between bursts of ``burst`` polls (one poll moves
    only a piece of a large transfer, so the sleeps would otherwise set the pace).
    """

    def __init__(
        self, spin_s: float = SPIN_S, sleep_s: float = SLEEP_S, burst: int = BURST, watch: Watch | None = None
    ) -> None:
        self.spin_s, self.sleep_s, self.burst = spin_s, sleep_s, max(1, burst)
        #: The collective timeout and roll call (:mod:`tfdist.sync.watch`), looked at on the slow path only.
        self.watch = watch

    def wait(self, request: Any) -> None:
        """Return once ``request`` completed; CollectiveError once it waited longer than the watch's
        timeout (the line names the collective of this thread's last ``watch.begin``)."""
        started = time.perf_counter()
        deadline = started + self.spin_s
        while not request.Test():
            if time.perf_counter() > deadline:
                self._wait_slowly(request, started)
                return

    def _wait_slowly(self, request: Any, started: float) -> None:
        """The wait of a rank whose peers are late: sleep between bursts of polls; every CHECK_S, answer
        the roll call and check the timeout (one clock read per wake-up)."""
        watch, check_at = self.watch, started + CHECK_S
        try:
            while True:
                for _ in range(self.burst):
                    if request.Test():
                        return
                time.sleep(self.sleep_s)
                if watch is not None and time.perf_counter() >= check_at:
                    check_at = watch.check(started) + CHECK_S
        finally:
            if watch is not None:
                watch.leave()


class NodeReducer:
    """Sum-all-reduce of packed float32 buffers: shared-memory reduce-scatter in each node, MPI across
    nodes."""

    def __init__(self, mpi: Any, comm: Any, waiter: Waiter, shared_memory: bool = True) -> None:
        self.mpi, self.waiter = mpi, waiter
        node = comm.Split_type(mpi.COMM_TYPE_SHARED, key=comm.Get_rank())
        # The two-level scheme needs the same number of ranks on every node (chunk i of every node goes
        # to the same cross-node group); otherwise, or when shared memory is turned off, each rank is its
        # own "node" and MPI does all the work.
        if not shared_memory or len(set(comm.allgather(node.Get_size()))) != 1:
            node.Free()
            node = comm.Split(comm.Get_rank(), 0)
        self.node = node
        self.local_rank, self.local_size = node.Get_rank(), node.Get_size()
        self.cross = comm.Split(self.local_rank, comm.Get_rank())
        self._windows: dict[int, tuple[Any, np.ndarray]] = {}
        #: What this rank's last sum across nodes put on the wire: (dtype, bytes); None before any.
        self.wire: tuple[Any, int] | None = None
        #: Bytes of every sum across nodes so far (the buffers' size, 16-bit ones at 2 bytes a value): the
        #: timeline divides them by its steps, and a link's rate turns them into the all-reduce's wire time.
        self.crossed = 0

    def describe(self) -> str:
        """The two levels as they run, e.g. ``4 ranks on 2 nodes (2 per node): shared memory within a
        node, MPI across nodes``."""
        nodes, per_node = self.cross.Get_size(), self.local_size
        ranks = nodes * per_node
        if per_node > 1:
            inside = "shared memory within a node"
        else:
            inside = "no shared-memory level (one rank per node, or TFDIST_MPI_SHM=0 / uneven nodes)"
        across = "MPI across nodes" if nodes > 1 else "no cross-node level"
        return (
            f"{ranks} rank(s) in {nodes} group(s) of {per_node} (local size {per_node}, cross size "
            f"{nodes}): {inside}, {across}"
        )

    def input_row(self, length: int) -> np.ndarray:
        """This rank's input row of the shared window for buffers of ``length`` floats (fill, then reduce)."""
        if length not in self._windows:
            # One input row per local rank plus the result row; a single rank needs no copy: its row is
            # the result. Allocated once per buffer length: reused memory does not page-fault every step.
            count = self.local_size + 1 if self.local_size > 1 else 1
            own = count * length if self.local_rank == 0 else 0
            try:
                window = self.mpi.Win.Allocate_shared(own * 4, 4, comm=self.node)
            except self.mpi.Exception as exc:
                raise SetupError(
                    f"could not allocate {own * 4 / 2**20:.0f} MiB of shared memory for the MPI all-reduce "
                    f"({exc}). Hint: enlarge /dev/shm (e.g. docker run --shm-size=2g) or set "
                    "TFDIST_MPI_SHM=0 to all-reduce through MPI alone."
                ) from None
            window.Lock_all(self.mpi.MODE_NOCHECK)  # one passive epoch for the run: Win.Sync needs it
            memory, _ = window.Shared_query(0)
            table = np.ndarray(buffer=memory, dtype=np.float32, shape=(count, length))
            self._windows[length] = (window, table)
        return self._windows[length][1][self.local_rank]

    def allreduce(
        self,
        length: int,
        compression: str = "none",
        waiter: Waiter | None = None,
        exact_from: int | None = None,
    ) -> np.ndarray:
        """Sum the input rows of ``length`` floats over all ranks (after filling :meth:`input_row`).

        Returns the result row, valid until this rank's next call with the same length (the next call's
        first barrier comes before anyone writes it). ``compression`` applies across nodes only
        (:func:`cross_sum_16`), to the floats before ``exact_from`` (metric sums and counts stay float32);
        ``waiter`` replaces this reducer's own (a background thread polls without spinning).
        """
        waiter = waiter or self.waiter
        window, table = self._windows[length]
        result = table[-1]
        if self.local_size > 1:
            self._node_barrier(window, waiter)
            lo, hi = chunk(length, self.local_rank, self.local_size)
            np.sum(table[: self.local_size, lo:hi], axis=0, out=result[lo:hi])
        else:
            lo, hi = 0, length
        if self.cross.Get_size() > 1:
            split = hi if compression == "none" or exact_from is None else max(lo, min(hi, exact_from))
            if split > lo and compression != "none":
                self.wire = cross_sum_16(self.cross, result[lo:split], compression, waiter)
                self.crossed += self.wire[1]
                lo = split
            else:
                self.wire = (np.dtype(np.float32), 4 * (hi - lo))
            if hi > lo:
                self.crossed += 4 * (hi - lo)
                waiter.wait(self.cross.Iallreduce(self.mpi.IN_PLACE, result[lo:hi], op=self.mpi.SUM))
        if self.local_size > 1:
            self._node_barrier(window, waiter)
        return result

    def _node_barrier(self, window: Any, waiter: Waiter) -> None:
        # The barrier orders the ranks; Sync makes the shared window's stores visible across them (MPI-3's
        # unified memory model asks for both).
        window.Sync()
        waiter.wait(self.node.Ibarrier())
        window.Sync()


def cross_sum_16(comm: Any, values: np.ndarray, compression: str, waiter: Waiter) -> tuple[Any, int]:
    """Sum float32 ``values`` in place over ``comm``, sending 16-bit floats; returns (wire dtype, bytes
    this rank sent in one message).

    One all-to-all (slice j of every rank to rank j, which adds the n decoded slices in float32 in rank
    order) and one all-gather of the encoded sums: a ring all-reduce's traffic, identical values on every
    rank, each rounded twice (before the sum and after it).
    """
    padded = encode(values, compression).view(np.uint16)
    decode(cross_sum_bits(comm, padded, compression, waiter), compression, out=values)
    return WIRE_DTYPES[compression], int(padded.nbytes)


def cross_sum_bits(comm: Any, bits: np.ndarray, compression: str, waiter: Waiter) -> np.ndarray:
    """The sum over ``comm`` of 16-bit floats given as their bits (uint16), as bits (see
    :func:`cross_sum_16`: one all-to-all, float32 additions in rank order, one all-gather)."""
    size = comm.Get_size()
    sent = np.zeros(aligned(-(-bits.size // size)) * size, np.uint16)  # the padding is +0.0 in both formats
    sent[: bits.size] = bits
    gathered = np.empty_like(sent)
    mine = scatter_sum_16(comm, sent, compression, waiter)
    waiter.wait(comm.Iallgather(encode(mine, compression).view(np.uint16), gathered))
    return gathered[: bits.size]


def scatter_sum_16(comm: Any, sent: np.ndarray, compression: str, waiter: Any) -> np.ndarray:
    """This rank's slice of the sum over ``comm`` of every rank's ``sent`` (16-bit floats as their bits,
    ``uint16``, a multiple of the rank count long), as float32.

    One all-to-all: slice j of every rank's buffer goes to rank j, which decodes the halves and adds them
    in float32 in rank order (the reduce-scatter half of :func:`cross_sum_bits`). The
    sum is not rounded again: it is the owner's alone, the optimizer updates from it and the weights travel
    back as float32, so every rank ends with the same values.

    Input/Output: 2 ranks sending fp16 bits of ``[1, 2, 3, 4]`` and ``[10, 20, 30, 40]``: rank 0 gets
    ``[11, 22]``, rank 1 ``[33, 44]``.
    """
    size = comm.Get_size()
    if sent.size % size:
        raise ValueError(f"{sent.size} values do not split into {size} equal slices")
    received = np.empty_like(sent)
    waiter.wait(comm.Ialltoall(sent, received))
    slices = received.reshape(size, -1)
    mine = decode(slices[0], compression)
    for rank in range(1, size):
        mine += decode(slices[rank], compression)
    return mine


def allgather_bytes(comm: Any, mpi: Any, waiter: Waiter, payload: bytes) -> list[bytes]:
    """Every rank's bytes, in rank order: two non-blocking collectives (the lengths, then the bytes),
    completed by ``waiter`` (so they time out and answer roll calls as the sums do)."""
    size = comm.Get_size()
    counts = np.empty(size, np.int64)
    waiter.wait(comm.Iallgather(np.array([len(payload)], np.int64), counts))
    data = np.empty(int(counts.sum()), np.uint8)
    offsets = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
    sendbuf = np.frombuffer(payload, np.uint8) if payload else np.empty(0, np.uint8)
    waiter.wait(comm.Iallgatherv(sendbuf, [data, counts.tolist(), offsets.tolist(), mpi.BYTE]))
    return [data[o : o + c].tobytes() for o, c in zip(offsets, counts, strict=True)]


def broadcast_bytes(comm: Any, waiter: Waiter, payload: bytes, root: int) -> bytes:
    """``root``'s bytes on every rank (``payload`` is read on the root only): the length, then the bytes,
    each a non-blocking broadcast completed by ``waiter``."""
    mine = comm.Get_rank() == root
    length = np.array([len(payload) if mine else 0], np.int64)
    waiter.wait(comm.Ibcast(length, root=root))
    data = np.frombuffer(payload, np.uint8).copy() if mine else np.empty(int(length[0]), np.uint8)
    if data.size:
        waiter.wait(comm.Ibcast(data, root=root))
    return data.tobytes()
