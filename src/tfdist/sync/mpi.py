"""The MPI synchroniser (mpi4py), Horovod's design without its build.

Each process runs a one-device strategy; one packed buffer per step (every gradient plus the metric sums)
is all-reduced by :mod:`tfdist.sync.reduce` (shared memory within a node, MPI across nodes).

A *named* sum is a request to the process's :class:`~tfdist.sync.coordinator.Coordinator`, so sums
issued in another order on each rank (gradient buckets as the backward pass produces them) still pair by
name, and the sums of one round travel in one packed buffer. The step's one unnamed sum runs at once in
the caller's thread, paired by order as every rank issues it in the same place: through the coordinator
the same step was slower (mnist-cnn, 2 ranks, 5 alternated repeats: 1,959 against 2,047 examples/s,
``benchmarks/results/horovod_commits.json``; a round and two thread hand-offs per step).

Every wait is polled (:class:`tfdist.sync.reduce.Waiter`, no blocking MPI call after set-up), so none
outlives ``TFDIST_COLLECTIVE_TIMEOUT``: each collective is labelled for the line that then ends the job
(:mod:`tfdist.sync.watch`).
"""

from __future__ import annotations

import contextlib
import itertools
import math
import os
import pickle
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from tfdist import variables
from tfdist._log import get_logger
from tfdist.backends import MPI_INSTALL_HINT as INSTALL_HINT
from tfdist.env.mpich import has_mpich_wheel, pmi1_safe_netmod
from tfdist.errors import CollectiveError, ConfigError, SetupError
from tfdist.nodes.mpi import (
    MPILibrary,
    alone,
    guess_launcher,
    launcher_rank,
    mismatch,
    read_library,
    started_by,
)
from tfdist.sync.base import ProcessLevel, pack_weights, unpack_weights
from tfdist.sync.coordinator import Coordinator, Request
from tfdist.sync.reduce import (
    NodeReducer,
    Waiter,
    aligned,
    allgather_bytes,
    broadcast_bytes,
    cross_sum_bits,
    layout,
)
from tfdist.sync.watch import Watch, current_step, different_gathers
from tfdist.sync.wire import (
    AUTO_STEPS,
    WireOptions,
    check_auto_share,
    choose_buckets,
    decode,
    encode,
    plan_buckets,
)

log = get_logger(__name__)

SUM = "SUM"  # the kind of this synchroniser's own requests: float32 sums


def import_mpi() -> Any:
    """``mpi4py.MPI``, or a SetupError saying how to install it.

    Importing ``mpi4py.MPI`` runs ``MPI_Init``, which reads MPICH's variables: the pmi2-safe network
    module is put in the environment first (:mod:`tfdist.env.mpich`), for a rank that ``srun --mpi=pmi2``
    started without ``tfdist run``. A launcher the library cannot hear ends the process first, with one
    line (:func:`check_launcher`), instead of MPI's abort or a job of lone ranks.
    """
    os.environ.update(pmi1_safe_netmod(os.environ, has_mpich_wheel()))
    if "mpi4py.MPI" not in sys.modules:
        check_launcher()
    try:
        from mpi4py import MPI
    except ImportError as exc:
        raise SetupError(f"the MPI backend needs mpi4py and an MPI library ({exc}). {INSTALL_HINT}") from None
    return MPI


def collective_timeout() -> float:
    """TFDIST_COLLECTIVE_TIMEOUT in seconds (0: none); ConfigError for a negative value."""
    seconds = float(variables.get("TFDIST_COLLECTIVE_TIMEOUT"))
    if seconds < 0 or not math.isfinite(seconds):
        raise ConfigError(
            f"TFDIST_COLLECTIVE_TIMEOUT={seconds:g} must be a number of seconds >= 0 (0: no timeout; default "
            "300)."
        )
    return seconds


def _library() -> MPILibrary | None:
    try:
        return read_library()
    except (OSError, RuntimeError, AttributeError):  # unreadable: MPI itself will say what is wrong
        return None


def stop(line: str) -> None:
    """End this rank on a wrong MPI stack: ConfigError under tfdist's worker (its hook prints the one line,
    records it for the launcher's report and exits 2); started by hand (``mpirun python train.py``, ``srun
    python train.py``), the same line from the launcher's first rank only (every rank reaches it: one line
    for the job, not one per rank) and exit code 2 on every rank, without a traceback."""
    if variables.raw("TFDIST_ATTEMPT_DIR"):
        raise ConfigError(line)
    sys.stdout.flush()
    if launcher_rank(os.environ) in (None, 0):
        sys.stderr.write(f"ConfigError: {line}\n")
        sys.stderr.flush()
    raise SystemExit(2)


def check_launcher() -> None:
    """Before MPI_Init: the launcher that started this process (its variables) against the library mpi4py
    loads (:func:`tfdist.nodes.mpi.mismatch`): Open MPI's mpirun starting MPICH's mpi4py, Hydra starting
    Open MPI's. Nothing is read when no launcher started the process (one process alone)."""
    by = started_by(os.environ)
    if by is None:
        return
    library = _library()
    line = mismatch(library, by, guess_launcher(library, sys.executable) if library else None)
    if line is not None:
        stop(line)


def check_world(size: int) -> None:
    """Stops the rank when its launcher started several ranks and MPI sees one
    (:func:`tfdist.nodes.mpi.alone`); ConfigError when the job's rank count differs from the count tfdist
    launched (``-n``)."""
    if size == 1:
        by = started_by(os.environ)
        library = _library() if by is not None else None
        line = alone(library, by, size, guess_launcher(library, sys.executable) if library else None)
        if line is not None:
            stop(line)
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
        burst = int(variables.get("TFDIST_MPI_POLL_BURST"))
        #: auto buckets' threshold: the share of a step the sum after the backward pass must take.
        self.auto_share = check_auto_share(
            variables.get("TFDIST_BUCKET_AUTO_SHARE"), "TFDIST_BUCKET_AUTO_SHARE"
        )
        if burst < 1:
            raise ConfigError(
                f"TFDIST_MPI_POLL_BURST={burst} must be at least 1 (polls per wake-up; default 16)."
            )
        # The roll call's own communicator, duplicated here since every rank makes its synchroniser at the
        # same point: a question never meets the sums' messages.
        roll_call = self.comm.Dup() if self.size > 1 else None
        self.watch = Watch(roll_call, mpi, self.rank, self.size, collective_timeout())
        waiter = Waiter(spin_s, poll_sleep_s, burst, self.watch)
        self.reducer = NodeReducer(mpi, self.comm, waiter, shared_memory=shared)
        # Sums that run while the backward pass computes must not spin on the core it computes on.
        progress_s = float(variables.get("TFDIST_MPI_PROGRESS_US")) / 1e6
        self.background = Waiter(0.0, progress_s, burst, self.watch)
        self._executors: dict[str, Callable[[list[Request]], None]] = {SUM: self._sums}
        self._reducing = threading.Lock()  # the caller's and the coordinator's sums share the windows
        self.coordinator = Coordinator(self.comm, mpi, self.reducer.waiter, self._execute, self.watch)
        self.coordinator.joinable.add(SUM)  # a joined rank adds zeros to the named sums of the others
        # The 16-bit sum with its middle in the graph (one rank per node): its own communicator, so that
        # nothing the coordinator sends between its all-to-all and its all-gather can meet them.
        cross = self.reducer.cross
        self._half_comm = cross.Dup() if self.reducer.local_size == 1 and cross.Get_size() > 1 else None
        self.options = WireOptions()
        self.configure(WireOptions.from_environment())
        self._exchanges = 0  # traced bucketed exchanges: names their sums, the same on every rank
        #: ``auto`` buckets: (start, seconds) of each gradient sum after the backward pass, until decided.
        self._sums_timed: list[tuple[float, float]] = []
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
            buckets = "auto" if self.options.auto else f"{self.options.bucket_mb} MB"
            log.info("MPI backend: gradients %s, buckets %s", options.compression, buckets)
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

    def graph_allreduce(
        self, parts: list[Any], keep: int = 0, name: str | None = None, label: str | None = None
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
        sizes = [g.shape.num_elements() for g in dense]
        options = self.options
        plain = options.compression == "none" and options.bucket_size == 0  # auto starts without buckets
        if self.size == 1 or plain or not dense or None in sizes:
            return super().exchange(grads, sums)
        if options.bucket_size == 0:  # the 16-bit wire without buckets: one sum, now, in this thread
            return self._one_half_sum(dense, sums)
        # Buckets, or compression (then one bucket: it is cast to 16 bits in the graph, see _bucketed).
        buckets = plan_buckets([4 * n for n in sizes], options.bucket_size * 2**20)
        if self.rank == 0:
            log.info("MPI backend: %d gradient(s) in %d bucket(s)", len(dense), len(buckets))
        outs = self._bucketed(dense, sums, buckets)
        order = [i for bucket in buckets for i in bucket]
        by_index = dict(zip(order, outs[:-1], strict=True))
        outs = [*(by_index[i] for i in range(len(dense))), outs[-1]]
        shaped = [tf.ensure_shape(o, p.shape) for o, p in zip(outs, [*dense, sums], strict=True)]
        return [tf.cast(r, g.dtype) for r, g in zip(shaped[:-1], dense, strict=True)], shaped[-1]

    def _one_half_sum(self, dense: list[Any], sums: Any) -> tuple[list[Any], Any]:
        """The gradients through the 16-bit wire and the metric sums exact, summed now in the caller's
        thread, paired by order as the unbucketed float32 sum is (every rank issues it in the same place).
        Why not through the coordinator as one bucket: its round (a negotiation, a hand-off to its thread,
        polls that sleep between bursts) cost about as much as the halved wire saved (mnist-cnn, 1 Gbit/s:
        43 ms left after the backward pass for 2.4 MB against 46 for 4.8 MB)."""
        import tensorflow as tf

        compression = self.options.compression
        wire = {"fp16": tf.float16, "bf16": tf.bfloat16}[compression]
        halves = [tf.cast(g, wire) for g in dense]
        if self._half_comm is not None:
            summed, total = self._half_sum_in_graph(halves, tf.cast(sums, tf.float32))
        else:

            def run(*arrays: np.ndarray) -> list[np.ndarray]:
                *halves, exact = arrays
                self.watch.begin("the gradient all-reduce")
                with self._timed(True):
                    summed = self._half_sums(
                        [np.asarray(h) for h in halves], compression, self.reducer.waiter
                    )
                    (total,) = self.packed_sum([np.asarray(exact, np.float32)])
                return [*summed, total]

            *summed, total = tf.numpy_function(
                run, [*halves, tf.cast(sums, tf.float32)], [wire] * len(dense) + [tf.float32], stateful=True
            )
        shaped = [tf.ensure_shape(o, p.shape) for o, p in zip([*summed, total], [*dense, sums], strict=True)]
        return [tf.cast(r, g.dtype) for r, g in zip(shaped[:-1], dense, strict=True)], shaped[-1]

    def _half_sum_in_graph(self, halves: list[Any], exact: Any) -> tuple[list[Any], Any]:
        """One rank per node: :func:`~tfdist.sync.reduce.cross_sum_bits` with its middle as graph ops.

        An all-to-all of the 16-bit slices (one op), then in the graph: the received slices widened to
        float32, added in rank order and rounded back to 16 bits, then the all-gather of every rank's sum
        with the exact metric sums (one op). The same values, bit for bit, as the NumPy middle (both round to
        nearest even and add float32 in rank order; tests/tf/test_wire_casts.py), without its cost: NumPy
        converts float16 one value at a time, slowly for subnormals, of which a summed gradient has many
        (mnist-cnn across 1 Gbit/s: the NumPy middle took 13.6 ms of the step; the sum after the backward
        pass went from 42 to 25 ms with it in the graph, the wire time being 20). Returns the summed 16-bit
        gradients (flat pieces, reshaped by the caller) and the sums.
        """
        import tensorflow as tf

        comm: Any = self._half_comm
        waiter = self.reducer.waiter
        size = comm.Get_size()
        wire, sizes = halves[0].dtype, [int(h.shape.num_elements()) for h in halves]
        total_size = sum(sizes)
        step = aligned(-(-total_size // size))
        flat = tf.concat([tf.reshape(h, [-1]) for h in halves], 0)
        # The padding is +0.0 in both formats; the bits travel, as the NumPy path sends them.
        bits = tf.bitcast(tf.pad(flat, [[0, step * size - total_size]]), tf.uint16)
        started: list[float] = []

        def send(sent: np.ndarray) -> np.ndarray:
            self.watch.begin("the gradient all-reduce")
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
            (sums,) = self.packed_sum([np.asarray(exact, np.float32)])
            with self._reducing:
                self.reducer.wire = (np.dtype(wire.as_numpy_dtype), 2 * total_size)
                self.reducer.crossed += 2 * total_size
            if self.options.auto and started:  # auto buckets time the whole sum, as _timed does
                self._note_sum(started[0])
            return [gathered, sums]

        gathered, total = tf.numpy_function(
            gather, [mine_bits, exact], [tf.uint16, tf.float32], stateful=True
        )
        summed = tf.bitcast(tf.ensure_shape(gathered, [step * size])[:total_size], wire)
        pieces = tf.split(summed, sizes)
        return [tf.reshape(p, h.shape) for p, h in zip(pieces, halves, strict=True)], total

    def _bucketed(self, dense: list[Any], sums: Any, buckets: list[list[int]]) -> list[Any]:
        """Graph ops: each bucket but the last submitted to the coordinator as soon as its gradients exist
        (the coordinator's thread sums it while the backward pass goes on); one last op submits the last
        bucket with the metric sums and waits for every bucket. Outputs in bucket order, then the sums."""
        import tensorflow as tf

        self._exchanges += 1
        tag, compression = f"tfdist.grads{self._exchanges}", self.options.compression
        # 16-bit gradients are cast in the graph (TensorFlow's casts are several times faster than
        # NumPy's float16 conversion on the core the step computes on) and come back 16-bit.
        wire = {"none": tf.float32, "fp16": tf.float16, "bf16": tf.bfloat16}[compression]
        tickets = []
        for number, bucket in enumerate(buckets[:-1]):
            tickets.append(
                tf.numpy_function(
                    lambda *arrays, name=f"{tag}/b{number}": self._submit(name, arrays, compression, 0),
                    [tf.cast(dense[i], wire) for i in bucket],
                    tf.int64,
                    stateful=True,
                )
            )
        if self.marker is not None:  # the timeline's "gradients ready", made after the sends (see it)
            mark = self.marker
            with tf.control_dependencies([*dense, sums]):
                tickets.append(
                    tf.numpy_function(
                        lambda: np.int64(mark("gradients ready") or -1), [], tf.int64, stateful=True
                    )
                )
        last = [tf.cast(dense[i], wire) for i in buckets[-1]]
        total = sum(len(b) for b in buckets)

        def finish(*given: Any) -> list[np.ndarray]:
            mine = self._submit(f"{tag}/b{len(buckets) - 1}", given[len(tickets) :], compression, 1)
            results: list[np.ndarray] = []
            for ticket in [*given[: len(tickets)], mine]:
                if ticket < 0:  # the timeline's stamp, not a sum
                    continue
                done = self.coordinator.wait(int(ticket))
                if done.error:
                    raise RuntimeError(done.error)
                results += done.result
            return results

        outs = tf.numpy_function(
            finish, [*tickets, *last, tf.cast(sums, tf.float32)], [wire] * total + [tf.float32], stateful=True
        )
        return [tf.cast(o, tf.float32) for o in outs[:-1]] + [outs[-1]]

    @contextlib.contextmanager
    def _timed(self, gradients: bool) -> Iterator[None]:
        """Time a gradient sum after the backward pass while ``auto`` buckets are undecided."""
        if not (gradients and self.options.auto):
            yield
            return
        start = time.perf_counter()
        yield
        self._note_sum(start)

    def _note_sum(self, start: float) -> None:
        """One gradient sum after the backward pass, from ``start`` to now, for ``auto``'s decision."""
        self._sums_timed.append((start, time.perf_counter() - start))

    @property
    def buckets_pending(self) -> bool:
        """Whether ``auto`` buckets wait for a decision that the steps measured so far allow."""
        return self.options.auto and len(self._sums_timed) > AUTO_STEPS

    def decide_buckets(self) -> bool:
        """``auto``'s decision, at the same step on every rank (a collective): each rank's median gradient
        sum and step period (the time between two sums' starts: everything a step takes), the first step
        left out (it traced the step), gathered, and :func:`~tfdist.sync.wire.choose_buckets` on them.
        True when buckets are now on: the caller traces its step again."""
        timed = self._sums_timed[1:]
        starts = [start for start, _ in timed]
        mine = [
            statistics.median(seconds for _, seconds in timed),
            statistics.median(b - a for a, b in itertools.pairwise(starts)),
        ]
        table = self.table(np.array(mine))
        size, share = choose_buckets(table[:, 0].tolist(), table[:, 1].tolist(), self.auto_share)
        self._sums_timed = []
        if self.rank == 0:
            log.info(
                "MPI backend: auto buckets: the gradient sum took %.0f %% of a step (%.1f of %.1f ms on the "
                "slowest rank), so %s",
                100 * share,
                1e3 * float(np.max(table[:, 0])),
                1e3 * float(np.max(table[:, 1])),
                f"{size:g} MB buckets from now on" if size else "one sum after the backward pass",
            )
        self.configure(WireOptions(self.options.compression, size))
        return size > 0

    @property
    def overlaps(self) -> bool:
        """Whether gradient sums start during the backward pass (buckets on, more than one rank)."""
        return self.size > 1 and self.options.bucket_size > 0

    def _submit(self, name: str, arrays: Sequence[np.ndarray], compression: str, exact: int) -> np.int64:
        """Hand one bucket to the coordinator (the last ``exact`` arrays are never compressed)."""
        if self.marker is not None:
            self.marker(f"sent {name.rsplit('/', 1)[-1]}")
        parts = [np.asarray(a) for a in arrays]
        return np.int64(
            self.coordinator.submit(Request(name, SUM, parts, args=(compression, exact), local=0))
        )

    def exchange_sums(self, sums: Any) -> Any:
        """Evaluation sums, summed over the ranks in the step."""
        return self.graph_allreduce([sums], label="the evaluation's metric all-reduce")[0]

    def step_total(self, value: Any) -> Any:
        """Summed over the ranks now (each rank is one replica): one all-reduce of one float."""
        import tensorflow as tf

        (total,) = self.graph_allreduce([tf.reshape(value, [1])], label="the all-reduce of the batch's rows")
        return total[0]

    def allreduce(
        self,
        parts: Sequence[np.ndarray],
        keep: int = 0,
        name: str | None = None,
        label: str | None = None,
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
        ``label`` names an unnamed sum in a timeout's line (default: the gradient all-reduce when ``keep``,
        the training step's sum of gradients and metric sums).
        """
        arrays = [np.asarray(p, np.float32) for p in parts]
        if name is None:
            label = label or ("the gradient all-reduce" if keep else "an all-reduce")
            with self._timed(keep > 0):
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
        with self._reducing:
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
            summed = self._half_sums([r.arrays[i] for r, i in halves], compression)
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

    def _half_sums(
        self, arrays: list[np.ndarray], compression: str, waiter: Waiter | None = None
    ) -> list[np.ndarray]:
        """Sums of 16-bit arrays (float16, or bfloat16), as arrays of the same dtype; polled by ``waiter``
        (default: the coordinator's, which sleeps between polls beside a backward pass).

        One rank per node: their bits go straight to the wire (:func:`cross_sum_bits`). Otherwise the
        node's shared-memory level needs float32: decoded, summed as the other gradients, encoded again.
        """
        waiter = waiter or self.background
        bits = np.concatenate([a.reshape(-1).view(np.uint16) for a in arrays])
        if self.reducer.local_size == 1 and self.reducer.cross.Get_size() > 1:
            with self._reducing:
                summed = cross_sum_bits(self.reducer.cross, bits, compression, waiter)
                self.reducer.wire = (arrays[0].dtype, int(bits.nbytes))
                self.reducer.crossed += int(bits.nbytes)
        else:
            (total,) = self.packed_sum([decode(bits, compression)], 1, 1, compression, waiter)
            summed = encode(total, compression).view(np.uint16)
        out, at = [], 0
        for a in arrays:
            out.append(summed[at : at + a.size].view(a.dtype).reshape(a.shape))
            at += a.size
        return out

    def allgather(self, array: np.ndarray, label: str = "an allgather") -> np.ndarray:
        """Every rank's array concatenated along the first axis, in rank order (uneven lengths allowed)."""
        return np.concatenate(self.allgather_object(np.ascontiguousarray(array), label=label), axis=0)

    def table(self, row: np.ndarray) -> np.ndarray:
        """Every rank's ``row``, in rank order (one small gather)."""
        row = np.asarray(row, np.float64).reshape(1, -1)
        return row if self.size == 1 else self.allgather(row, "the allgather of the workers' settings")

    def agree(self, flag: bool) -> bool:
        """Whether any rank passed True (one small gather; nothing to ask in a one-rank job)."""
        if self.size == 1:
            return flag
        votes = self.allgather(np.array([float(flag)], np.float32), "the allgather of the votes to stop")
        return bool(votes.sum() > 0)

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
