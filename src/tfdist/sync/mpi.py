"""The MPI synchroniser (mpi4py), Horovod's design without its build.

Each process runs a one-device strategy; one packed buffer per step (every gradient plus the metric sums)
is all-reduced by :mod:`tfdist.sync.reduce` (shared memory within a node, MPI across nodes).

A *named* sum is a request to the process's :class:`~tfdist.sync.coordinator.Coordinator`, so sums
issued in another order on each rank (gradient buckets as the backward pass produces them) still pair by
name, and the sums of one round travel in one packed buffer. The step's one unnamed sum runs at once in
the caller's thread, paired by order as every rank issues it in the same place: through the coordinator
the same step was slower (mnist-cnn, 2 ranks, 5 alternated repeats: 1,959 against 2,047 examples/s,
``benchmarks/results/horovod_commits.json``; a round and two thread hand-offs per step).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from tfdist import variables
from tfdist._log import get_logger
from tfdist.backends import MPI_INSTALL_HINT as INSTALL_HINT
from tfdist.errors import ConfigError, SetupError
from tfdist.sync.base import ProcessLevel, pack_weights, unpack_weights
from tfdist.sync.coordinator import Coordinator, Request
from tfdist.sync.reduce import NodeReducer, Waiter, layout

log = get_logger(__name__)

SUM = "SUM"  # the kind of this synchroniser's own requests: float32 sums


def import_mpi() -> Any:
    """``mpi4py.MPI``, or a SetupError saying how to install it."""
    try:
        from mpi4py import MPI
    except ImportError as exc:
        raise SetupError(f"the MPI backend needs mpi4py and an MPI library ({exc}). {INSTALL_HINT}") from None
    return MPI


def check_world(size: int) -> None:
    """ConfigError when the job's rank count differs from the count tfdist launched (``-n``)."""
    expected = variables.raw("TFDIST_WORLD_SIZE")
    if expected and int(expected) != size:
        raise ConfigError(
            f"the MPI job has {size} rank(s) but tfdist expected {expected} (TFDIST_WORLD_SIZE / -n). "
            f"Hint: start it with the same count, e.g. mpirun -np {expected}."
        )


class MPISync(ProcessLevel):
    """Sum-all-reduces float32 buffers over MPI_COMM_WORLD and broadcasts initial weights from rank 0."""

    name = "mpi"

    def __init__(self) -> None:
        mpi = import_mpi()
        self.mpi = mpi
        self.comm = mpi.COMM_WORLD
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()
        check_world(self.size)
        # Override knobs for machines where spinning is cheaper (one rank per dedicated core).
        spin_s = float(variables.get("TFDIST_MPI_SPIN_US")) / 1e6
        poll_sleep_s = float(variables.get("TFDIST_MPI_POLL_SLEEP_US")) / 1e6
        shared = bool(variables.get("TFDIST_MPI_SHM"))
        self.reducer = NodeReducer(mpi, self.comm, Waiter(spin_s, poll_sleep_s), shared_memory=shared)
        self._executors: dict[str, Callable[[list[Request]], None]] = {SUM: self._sums}
        self._reducing = threading.Lock()  # the caller's and the coordinator's sums share the windows
        self.coordinator = Coordinator(self.comm, mpi, self.reducer.waiter, self._execute)
        if self.rank == 0:
            log.info("MPI backend: %s", self.reducer.describe())

    def register(self, kinds: Iterable[str], execute: Callable[[list[Request]], None]) -> None:
        """Let ``execute`` run the matched requests of ``kinds`` (Horovod's collectives): the same list,
        in the same order, on every rank, on the coordinator's thread."""
        for kind in kinds:
            self._executors[kind] = execute

    def graph_allreduce(self, parts: list[Any], keep: int = 0, name: str | None = None) -> list[Any]:
        """:meth:`allreduce` as a step of the training graph: float32 tensors in, their sums out."""
        import tensorflow as tf

        parts = [tf.cast(p, tf.float32) for p in parts]
        outs = tf.numpy_function(
            lambda *arrays: self.allreduce(arrays, keep, name),
            parts,
            [tf.float32] * len(parts),
            stateful=True,
        )
        return [tf.ensure_shape(o, p.shape) for o, p in zip(outs, parts, strict=True)]

    def allreduce(
        self, parts: Sequence[np.ndarray], keep: int = 0, name: str | None = None
    ) -> list[np.ndarray]:
        """Element-wise sums over all ranks of every array in ``parts``, through one packed all-reduce.

        With a ``name``, matched across ranks by it (the n-th call of a name on one rank pairs with the
        n-th on every other) and packed with whatever else is ready everywhere; without one, run now in
        this thread, paired by order (every rank must make its unnamed calls in the same order, and not
        while named sums of this process are in flight).

        The first ``keep`` results are views of shared memory that the next sum of the same packed length
        overwrites (the training step consumes the gradients in ``apply_gradients`` before it returns);
        the others are fresh copies the caller may keep (the metric sums, accumulated across steps).
        RuntimeError naming both sides when the ranks passed different shapes under one name.
        """
        arrays = [np.asarray(p, np.float32) for p in parts]
        if name is None:
            return self.packed_sum(arrays, keep)
        done = self.coordinator.wait(self.coordinator.submit(Request(name, SUM, arrays, local=keep)))
        if done.error:
            raise RuntimeError(done.error)
        return done.result

    def packed_sum(self, parts: Sequence[np.ndarray], keep: int = 0) -> list[np.ndarray]:
        """Sums of ``parts`` through ONE packed all-reduce, now, unmatched: for unnamed sums and for the
        coordinator's executors, where every rank runs the same list of requests; ``keep`` as in
        :meth:`allreduce`."""
        offsets, length = layout([p.size for p in parts])
        with self._reducing:
            row = self.reducer.input_row(length)
            for part, start in zip(parts, offsets, strict=True):
                row[start : start + part.size] = part.ravel()
            result = self.reducer.allreduce(length)
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
        """This round's sums, in one packed all-reduce."""
        parts = [a for r in requests for a in r.arrays]
        views = self.packed_sum(parts, keep=len(parts))
        at = 0
        for request in requests:
            mine, keep = views[at : at + len(request.arrays)], request.local
            at += len(request.arrays)
            request.result = mine[:keep] + [v.copy() for v in mine[keep:]]

    def allgather(self, array: np.ndarray) -> np.ndarray:
        """Every rank's array concatenated along the first axis, in rank order (uneven lengths allowed)."""
        return np.concatenate(self.comm.allgather(np.ascontiguousarray(array)), axis=0)

    def barrier(self) -> None:
        """Return once every rank got here (a one-float all-reduce, polled like the training ones)."""
        self.allreduce([np.zeros(1, np.float32)])

    def broadcast_weights(self, model: Any) -> None:
        """Give every rank rank 0's initial weights (one packed broadcast)."""
        weights = model.get_weights()
        flat = pack_weights(weights)
        self.comm.Bcast(flat, root=0)
        model.set_weights(unpack_weights(flat, weights))
