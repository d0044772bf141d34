"""The MPI synchroniser (mpi4py): Horovod's design without its build.

Each process runs a one-device strategy; one packed buffer per step (every gradient and the metric sums) is
summed by :mod:`tfdist.sync.reduce` (shared memory within a node, MPI across nodes). A *named* sum goes
through the process's :class:`~tfdist.sync.coordinator.Coordinator` (paired by name across ranks, fused
per round); the step's one unnamed sum runs at once in the caller's thread, paired by order, which is
faster (docs/performance.md). Buckets are :mod:`tfdist.sync.buckets`', the 16-bit wire without them
:mod:`tfdist.sync.half`'s. Every wait is polled and labelled, so none outlives
``TFDIST_COLLECTIVE_TIMEOUT`` silently (:mod:`tfdist.sync.watch`).
"""

from __future__ import annotations

import math
import pickle
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from tfdist import variables
from tfdist._log import get_logger
from tfdist.errors import CollectiveError, ConfigError
from tfdist.mpi.rank import check_world, import_mpi
from tfdist.sync import buckets, half
from tfdist.sync.base import ProcessLevel, pack_weights, unpack_weights
from tfdist.sync.coordinator import Coordinator
from tfdist.sync.reduce import PROGRESS_S, NodeReducer, Waiter, allgather_bytes, broadcast_bytes, layout
from tfdist.sync.request import SUM, Request
from tfdist.sync.watch import Watch, current_step, different_gathers
from tfdist.sync.wire import WireOptions, check_auto_share

log = get_logger(__name__)


def collective_timeout() -> float:
    """TFDIST_COLLECTIVE_TIMEOUT in seconds (0: none); ConfigError for a negative value."""
    seconds = float(variables.get("TFDIST_COLLECTIVE_TIMEOUT"))
    if seconds < 0 or not math.isfinite(seconds):
        raise ConfigError(
            f"TFDIST_COLLECTIVE_TIMEOUT={seconds:g} must be a number of seconds >= 0 (0: no timeout; default "
            "300)."
        )
    return seconds


class MPISync(ProcessLevel):
    """Sum-all-reduces float32 buffers over MPI_COMM_WORLD and broadcasts initial weights from rank 0."""

    name = "mpi"

    def __init__(self) -> None:
        mpi = import_mpi()
        self.mpi = mpi
        self.comm = mpi.COMM_WORLD
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()
        check_world(self.size)
        auto_share = check_auto_share(variables.get("TFDIST_BUCKET_AUTO_SHARE"), "TFDIST_BUCKET_AUTO_SHARE")
        # The roll call's own communicator, duplicated here since every rank makes its synchroniser at the
        # same point: a question never meets the sums' messages.
        roll_call = self.comm.Dup() if self.size > 1 else None
        self.watch = Watch(roll_call, mpi, self.rank, self.size, collective_timeout())
        shared = bool(variables.get("TFDIST_MPI_SHM"))
        self.reducer = NodeReducer(mpi, self.comm, Waiter(watch=self.watch), shared_memory=shared)
        # Sums that run while the backward pass computes must not spin on the core it computes on.
        self.background = Waiter(0.0, PROGRESS_S, watch=self.watch)
        self._executors: dict[str, Callable[[list[Request]], None]] = {SUM: self._sums}
        self.reducing = threading.Lock()  # the caller's and the coordinator's sums share the windows
        self.coordinator = Coordinator(self.comm, mpi, self.reducer.waiter, self._execute, self.watch)
        self.coordinator.joinable.add(SUM)  # a joined rank adds zeros to the named sums of the others
        # The 16-bit sum with its middle in the graph (one rank per node): its own communicator, so that
        # nothing the coordinator sends between its all-to-all and its all-gather can meet them.
        cross = self.reducer.cross
        self.half_comm = cross.Dup() if self.reducer.local_size == 1 and cross.Get_size() > 1 else None
        self.options = WireOptions()
        self.auto = buckets.AutoBuckets(auto_share)
        self.configure(WireOptions.from_environment())
        self.exchanges = 0  # traced bucketed exchanges: names their sums, the same on every rank
        #: Called with "sent bN" / "summed bN" (the timeline's stamps), when set.
        self.marker: Callable[[str], None] | None = None
        if self.rank == 0:
            log.info("MPI backend: %s", self.reducer.describe())

    def configure(self, options: WireOptions) -> None:
        """Compression and buckets of the gradient sums traced from now on (``tfdist.fit``'s options, else
        TFDIST_COMPRESSION / TFDIST_BUCKET_MB)."""
        # Within one node nothing travels: no bytes to compress, no transfer to hide behind the backward
        # pass (the shared-memory sum takes ~0.4 ms), and a bucket's round through the coordinator costs.
        across = self.reducer.cross.Get_size() > 1
        self.options = options if across else WireOptions()
        # With buckets the coordinator's rounds run beside the backward pass: poll, do not spin (auto: a
        # Horovod script's buckets, see tfdist.horovod.gradients).
        overlapping = self.options.bucket_size > 0 or self.options.auto
        self.coordinator.waiter = self.background if overlapping else self.reducer.waiter
        if self.rank == 0 and self.options != WireOptions():
            size = "auto" if self.options.auto else f"{self.options.bucket_mb} MB"
            log.info("MPI backend: gradients %s, buckets %s", options.compression, size)
        elif self.rank == 0 and options.compression != "none":  # asked for, and not done: say why
            log.info("MPI backend: one node, so gradients uncompressed, no buckets (nothing crosses a link)")

    def register(
        self, kinds: Iterable[str], execute: Callable[[list[Request]], None], joinable: Iterable[str] = ()
    ) -> None:
        """Let ``execute`` run the matched requests of ``kinds`` (Horovod's collectives): the same list,
        in the same order, on every rank, on the coordinator's thread. A rank that joined (``hvd.join()``)
        takes part in those of ``joinable`` with zeros."""
        for kind in kinds:
            self._executors[kind] = execute
        self.coordinator.joinable.update(joinable)

    @property
    def overlaps(self) -> bool:
        """Whether gradient sums start during the backward pass (buckets on, more than one rank)."""
        return self.size > 1 and self.options.bucket_size > 0

    def at_sync_point(self) -> bool:
        """``auto`` buckets decided once enough steps were timed (at the same sync point on every rank);
        True when they turned on: the caller traces its step again."""
        if not (self.options.auto and self.auto.ready()):
            return False
        size = self.auto.decide(self.table, self.rank == 0)
        self.configure(WireOptions(self.options.compression, size))
        return size > 0

    def graph_allreduce(
        self, parts: list[Any], keep: int = 0, label: str | None = None, name: str | None = None
    ) -> list[Any]:
        """:meth:`allreduce` as a step of the training graph: float32 tensors in, their sums out."""
        import tensorflow as tf

        parts = [tf.cast(p, tf.float32) for p in parts]
        outs = tf.numpy_function(
            lambda *arrays: self.allreduce(arrays, keep, name, label),
            parts,
            [tf.float32] * len(parts),
            stateful=True,
        )
        return [tf.ensure_shape(o, p.shape) for o, p in zip(outs, parts, strict=True)]

    def exchange(self, grads: list[Any], sums: Any) -> tuple[list[Any], Any]:
        """The step's gradient sums (compressed and in buckets as :attr:`options` says) and metric sums."""
        import tensorflow as tf

        dense = [tf.convert_to_tensor(g) for g in grads]  # IndexedSlices become dense tensors
        options = self.options
        plain = options.compression == "none" and options.bucket_size == 0  # auto starts without buckets
        if self.size == 1 or plain or not dense or None in [g.shape.num_elements() for g in dense]:
            return super().exchange(grads, sums)
        if options.bucket_size == 0:  # the 16-bit wire without buckets: one sum, now, in this thread
            return half.exchange(self, dense, sums)
        return buckets.exchange(self, dense, sums)

    def allreduce(
        self,
        parts: Sequence[np.ndarray],
        keep: int = 0,
        name: str | None = None,
        label: str | None = None,
    ) -> list[np.ndarray]:
        """Element-wise sums over all ranks of every array in ``parts``, through one packed all-reduce.

        With a ``name``, matched across ranks by it and packed with whatever else is ready everywhere;
        without one, run now in this thread, paired by order (every rank must make its unnamed calls in the
        same order, and not while named sums of this process are in flight). The first ``keep`` results are
        views of shared memory that the next sum of the same packed length overwrites (the step consumes
        the gradients before it returns); the others are copies. RuntimeError naming both sides when the
        ranks passed different shapes under one name. ``label`` names an unnamed sum in a timeout's line.
        """
        arrays = [np.asarray(p, np.float32) for p in parts]
        if name is None:
            label = label or ("the gradient all-reduce" if keep else "an all-reduce")
            with self.auto.timed(keep > 0 and self.options.auto):
                return self.packed_sum(arrays, keep, label=label)
        done = self.coordinator.wait(self.coordinator.submit(Request(name, SUM, arrays, local=keep)))
        if done.error:
            raise RuntimeError(done.error)
        return done.result

    def packed_sum(
        self,
        parts: Sequence[np.ndarray],
        keep: int = 0,
        compressed: int = 0,
        compression: str = "none",
        waiter: Waiter | None = None,
        label: str | None = None,
    ) -> list[np.ndarray]:
        """Sums of ``parts`` through ONE packed all-reduce, now, unmatched: for unnamed sums and for the
        coordinator's executors, where every rank runs the same list of requests; ``keep`` as in
        :meth:`allreduce`. The first ``compressed`` parts cross nodes as ``compression`` (gradients); the
        others stay exact float32 (metric sums and counts). ``label``: a collective of its own, named so
        in a timeout (None: part of the caller's, a coordinator's round)."""
        if label is not None:
            self.watch.begin(label)
        offsets, length = layout([p.size for p in parts])
        exact_from = offsets[compressed] if compressed < len(parts) else length
        with self.reducing:
            row = self.reducer.input_row(length)
            for part, start in zip(parts, offsets, strict=True):
                row[start : start + part.size] = part.ravel()
            result = self.reducer.allreduce(
                length, compression if compressed else "none", waiter, exact_from=exact_from
            )
        views = [
            result[start : start + p.size].reshape(p.shape) for p, start in zip(parts, offsets, strict=True)
        ]
        return views[:keep] + [v.copy() for v in views[keep:]]

    def _execute(self, requests: list[Request]) -> None:
        batches: dict[Callable[[list[Request]], None], list[Request]] = {}
        for request in requests:  # grouped by executor, in the order of their first request (every rank's)
            batches.setdefault(self._executors[request.kind], []).append(request)
        for execute, batch in batches.items():
            execute(batch)

    def _sums(self, requests: list[Request]) -> None:
        """This round's sums: the float32 ones in one packed all-reduce, the 16-bit gradients (cast in the
        graph) in one all-reduce of their bits."""
        slots = [(r, i) for r in requests for i in range(len(r.arrays))]
        halves = [(r, i) for r, i in slots if r.arrays[i].dtype.itemsize == 2]
        exact = [(r, i) for r, i in slots if r.arrays[i].dtype.itemsize != 2]
        results: dict[tuple[int, int], np.ndarray] = {}
        if halves:
            compression = next(r.args[0] for r, _ in halves)
            summed = half.sums_of(self, [r.arrays[i] for r, i in halves], compression)
            results.update({(id(r), i): v for (r, i), v in zip(halves, summed, strict=True)})
        if exact:
            # Requests of the MPI backend's own buckets carry (compression, exact tail); float32 arrays
            # of a bucket before its tail may be compressed in the packed buffer: they go first.
            flagged = [(r, i, bool(r.args) and i < len(r.arrays) - r.args[1]) for r, i in exact]
            flagged.sort(key=lambda slot: not slot[2])  # stable
            parts = [r.arrays[i] for r, i, _ in flagged]
            count = sum(1 for *_, c in flagged if c)
            compression = next((r.args[0] for r, _ in exact if r.args), "none")
            waiter = self.background if any(r.args for r, _ in exact) else None
            views = self.packed_sum(parts, len(parts), count, compression, waiter)
            results.update({(id(r), i): v for (r, i, _), v in zip(flagged, views, strict=True)})
        for request in requests:
            if request.args and self.marker is not None:  # a bucket: when its sum came back
                self.marker(f"summed {request.name.rsplit('/', 1)[-1]}")
            keep = request.local
            mine = [results[id(request), i] for i in range(len(request.arrays))]
            request.result = [
                v if i < keep or v.dtype.itemsize == 2 else v.copy() for i, v in enumerate(mine)
            ]

    def allgather(self, array: np.ndarray, label: str = "an allgather") -> np.ndarray:
        """Every rank's array concatenated along the first axis, in rank order (uneven lengths allowed)."""
        return np.concatenate(self.allgather_object(np.ascontiguousarray(array), label=label), axis=0)

    def allgather_object(self, obj: Any, comm: Any = None, label: str = "allgather_object") -> list[Any]:
        """Every rank's picklable ``obj``, in rank order, over ``comm`` (default: the job's)."""
        comm = comm or self.comm
        self.watch.begin(label)
        # The label travels with the object: ranks that reached different gathers (a collective in a
        # callback on one rank only) are told so in one line, not by whatever their objects do together.
        payloads = allgather_bytes(comm, self.mpi, self.reducer.waiter, pickle.dumps((label, obj)))
        gathered = [pickle.loads(p) for p in payloads]
        labels = [g[0] for g in gathered]
        if len(set(labels)) > 1:
            raise CollectiveError(different_gathers(labels, current_step()))
        return [g[1] for g in gathered]

    def broadcast_object(
        self, obj: Any, root: int = 0, comm: Any = None, label: str = "broadcast_object"
    ) -> Any:
        """``root``'s picklable ``obj`` on every rank, over ``comm`` (default: the job's)."""
        comm = comm or self.comm
        self.watch.begin(label)
        payload = pickle.dumps(obj) if comm.Get_rank() == root else b""
        return pickle.loads(broadcast_bytes(comm, self.reducer.waiter, payload, root))

    def barrier(self) -> None:
        """Return once every rank got here (a one-float all-reduce, polled like the training ones)."""
        self.allreduce([np.zeros(1, np.float32)], label="a barrier")

    def broadcast_weights(self, model: Any) -> None:
        """Give every rank rank 0's initial weights (one packed broadcast)."""
        weights = model.get_weights()
        flat = pack_weights(weights)
        self.watch.begin("the broadcast of the initial weights")
        if self.size > 1 and flat.size:
            self.reducer.waiter.wait(self.comm.Ibcast(flat, root=0))
        model.set_weights(unpack_weights(flat, weights))
