"""Optimizer-state sharding (ZeRO stage 1) on the MPI backend: each rank keeps the slots of 1/N of the
weights.

Data parallelism copies the optimizer's slots to every rank (Adam: two per weight). Sharded, the job's
trainable weights are seen as ONE flat vector of P elements, padded to a multiple of N, and rank r owns
the slice ``[r * P/N, (r + 1) * P/N)``. Each step:

1. the flat gradient is reduce-scattered (``MPI_Ireduce_scatter_block``): rank r receives the SUM of its
   slice only; the step's metric sums travel beside it in a small all-reduce. With the 16-bit wire
   (``compression`` fp16 / bf16, applied when the job spans nodes as for unsharded steps) each rank sends
   its gradients rounded to 16 bits in one all-to-all and rank r adds the N halves of its slice in float32,
   in rank order (:func:`scatter_sum_16`): one rounding per gradient, none after the sum;
2. the model's optimizer, built over one flat variable of P/N elements (its slots are P/N each), applies
   that slice to the rank's slice of the current weights;
3. the updated slices are all-gathered (``MPI_Iallgather``) into every rank's full weights.

The optimizers accepted are element-wise (SGD with momentum, Adam, AdamW, RMSprop: each element's update
reads only that element's gradient and slots, weight decay included), so updating a slice is the same
arithmetic as updating the whole. Clipping by a norm is not element-wise and is refused with one line, as
is what would need the per-variable identity the flat slice loses (weight-decay exclusions).

The collectives are plain MPI over a duplicate of the backend's communicator, not its shared-memory
all-reduce: a reduce-scatter and an all-gather move the same bytes as one all-reduce between them. The
all-gather of the updated weights is float32 whatever the wire: every rank must hold the same exact weights.

With gradient buckets (``bucket_mb``: a size asked for, on any number of nodes; ``auto``, the default,
measures steps whose layout a shard could not change afterwards, so it means one piece here), each bucket
is reduce-scattered on its own as soon as the backward pass produced its gradients (the backend's
coordinator thread matches them by name across ranks, as it does unsharded buckets), and rank r owns its
slice of every bucket (:class:`ShardLayout`). That is also ZeRO stage 2's saving: a bucket's gradients are
released once its reduce-scatter took them, so a rank never holds the job's whole gradient packed for
sending, nor the summed gradient beyond its own slices; without buckets the backward pass's gradients and
their packed copy exist at once (stage 1).

Every wait goes through the backend's :class:`~tfdist.sync.reduce.Waiter` (polled, with the collective
timeout) and each collective is named for a timeout's line.

Checkpoints stay whole (:meth:`ShardedOptimizer.whole`): at a save the slots are gathered to the chief
into a full-size copy of the optimizer, written in the unsharded format; a restore reads that format and
keeps each rank's slice, so a checkpoint moves between rank counts and between sharded and unsharded runs.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tfdist import variables
from tfdist._log import get_logger
from tfdist.errors import ConfigError
from tfdist.sync.coordinator import Request
from tfdist.sync.wire import AUTO, check_bucket_setting, decode, encode, plan_buckets

log = get_logger(__name__)

#: Optimizers whose update is element-wise (Keras 3 class names); their slots are sliced with the weights.
ELEMENTWISE = ("SGD", "Adam", "AdamW", "RMSprop")
#: The flat variable the optimizer is built over; its slots are named ``<optimizer>/tfdist_shard_<slot>``.
SHARD_NAME = "tfdist_shard"
HINT = "Hint: leave shard_optimizer out (or TFDIST_SHARD_OPTIMIZER=0)"
#: The coordinator's kind of a sharded job's bucket reduce-scatters (and the step's metric sums beside them).
SCATTER = "SHARD_SCATTER"
#: The shard each optimizer was built over (by id, with a weak reference to tell a reused id apart).
_SHARDS: dict[int, tuple[Any, Any, Any]] = {}


def wanted(option: bool | None) -> bool:
    """``tfdist.fit(shard_optimizer=...)``, else ``TFDIST_SHARD_OPTIMIZER``."""
    return bool(variables.get("TFDIST_SHARD_OPTIMIZER")) if option is None else bool(option)


def check_backend(backend: str) -> None:
    """ConfigError unless the backend is MPI: sharding needs a reduce-scatter and an all-gather between
    processes, which TensorFlow's collectives (one strategy over every worker) and Horovod do not give
    here."""
    if backend != "mpi":
        raise ConfigError(
            f"shard_optimizer needs the mpi backend, but this run's backend is {backend}. Hint: launch with "
            "--backend mpi, or leave shard_optimizer out."
        )


def check_not_parameter_server(option: bool | None) -> None:
    """ConfigError when sharding is asked for (``tfdist.fit``'s option, else TFDIST_SHARD_OPTIMIZER) under
    ParameterServerStrategy, where the parameter servers already hold the slots, split between them."""
    if wanted(option):
        raise ConfigError(
            "shard_optimizer does not apply under ParameterServerStrategy: the parameter servers hold the "
            f"optimizer's slots, already split between them. {HINT}."
        )


def bucket_choice(bucket_mb: float | str | None, backend_default: float) -> float:
    """The bucket size of a sharded job, in MB (0: one reduce-scatter after the backward pass):
    ``tfdist.fit``'s ``bucket_mb``, else TFDIST_BUCKET_MB when set (both on any number of nodes: on one
    node buckets still serve memory), else the MPI backend's configured size (its default across nodes,
    none within one)."""
    if bucket_mb is None and variables.is_set("TFDIST_BUCKET_MB"):
        bucket_mb = check_bucket_setting(variables.get("TFDIST_BUCKET_MB"), "TFDIST_BUCKET_MB")
    if bucket_mb is None or bucket_mb == AUTO:
        # auto measures the first steps and retraces; a shard's layout is fixed once built: the backend's
        # size as it stands when the shard is made (none until auto decided).
        return float(backend_default)
    return float(bucket_mb)


def check_optimizer(optimizer: Any) -> None:
    """ConfigError, one line, for an optimizer whose update a flat slice would change."""
    kind = type(optimizer).__name__
    if kind not in ELEMENTWISE:
        raise ConfigError(
            f"shard_optimizer supports the element-wise optimizers {', '.join(ELEMENTWISE)}; got {kind}. "
            f"{HINT}."
        )
    if getattr(optimizer, "clipnorm", None) or getattr(optimizer, "global_clipnorm", None):
        raise ConfigError(
            "shard_optimizer does not support clipnorm / global_clipnorm (a norm spans every rank's shard). "
            f"Hint: use clipvalue, or {HINT[6:]}."
        )
    if getattr(optimizer, "use_ema", False) or getattr(optimizer, "gradient_accumulation_steps", None):
        raise ConfigError(f"shard_optimizer does not support use_ema or gradient_accumulation_steps. {HINT}.")
    if getattr(optimizer, "_exclude_from_weight_decay", None) or getattr(
        optimizer, "_exclude_from_weight_decay_pattern", None
    ):
        raise ConfigError(
            "shard_optimizer does not support exclude_from_weight_decay (a shard is one flat variable). "
            f"{HINT}."
        )


@dataclass(frozen=True)
class ShardLayout:
    """Where one rank's shard lies in the job's trainable weights (pure).

    The weights are grouped into ``buckets`` (variable indices, in the order each bucket is packed; none:
    one bucket of every variable in the model's order). Each bucket's flat elements are padded to a
    multiple of N and split into N equal slices; rank r's shard is its slice of every bucket, bucket after
    bucket. One bucket is the flat vector of every weight cut in N.

    Input/Output: ``ShardLayout((6, 3), rank=1, size=2)``: P = 9 padded to 10, shards of 5; rank 1 owns
    flat elements 5..9, i.e. ``pieces == ((0, 5, 6), (1, 0, 3))`` (variable, start, stop) and 1 padding.
    ``ShardLayout((6, 3), 1, 2, buckets=((1,), (0,)))``: slices of 2 and 3, rank 1 owns element 2 of
    variable 1 (and one padding), then elements 3..5 of variable 0:
    ``segments() == ((1, 2, 3, 0), (0, 3, 6, 2))`` (variable, start, stop, where in the shard).
    """

    sizes: tuple[int, ...]
    rank: int
    size: int
    buckets: tuple[tuple[int, ...], ...] = ()

    def __post_init__(self) -> None:
        if not self.sizes or sum(self.sizes) == 0:
            raise ConfigError(
                "shard_optimizer: the model has no trainable weights; there is nothing to shard."
            )
        if not 0 <= self.rank < self.size:
            raise ValueError(f"rank {self.rank} is not in a job of {self.size}")
        if self.buckets and sorted(i for b in self.buckets for i in b) != list(range(len(self.sizes))):
            raise ValueError(f"buckets {self.buckets} do not hold each of {len(self.sizes)} variables once")

    @property
    def total(self) -> int:
        """P: every trainable element."""
        return sum(self.sizes)

    @property
    def groups(self) -> tuple[tuple[int, ...], ...]:
        """The variables of each bucket, in packing order (one bucket of all, in order, without buckets)."""
        return self.buckets or (tuple(range(len(self.sizes))),)

    @property
    def slices(self) -> tuple[int, ...]:
        """Each bucket's elements per rank (its elements / N, rounded up)."""
        return tuple(-(-sum(self.sizes[i] for i in group) // self.size) for group in self.groups)

    @property
    def shard(self) -> int:
        """Elements per rank: its slice of every bucket."""
        return sum(self.slices)

    @property
    def padded(self) -> int:
        """Every rank's shard together: P with each bucket padded to N slices."""
        return self.shard * self.size

    def segments(self, rank: int | None = None) -> tuple[tuple[int, int, int, int], ...]:
        """(variable, start, stop, at): each run of a variable's own flat elements in the shard of
        ``rank`` (default: this layout's), with where the run starts in that shard."""
        rank = self.rank if rank is None else rank
        out, at = [], 0
        for group, width in zip(self.groups, self.slices, strict=True):
            lo, hi = rank * width, (rank + 1) * width
            start = 0  # where the variable starts in its bucket
            for index in group:
                n = self.sizes[index]
                a, b = max(lo, start), min(hi, start + n)
                if a < b:
                    out.append((index, a - start, b - start, at + a - lo))
                start += n
            at += width
        return tuple(out)

    @property
    def pieces(self) -> tuple[tuple[int, int, int], ...]:
        """(variable, start, stop) in that variable's own flat elements, for each run in this rank's shard."""
        return tuple((index, a, b) for index, a, b, _ in self.segments())

    @property
    def padding(self) -> int:
        """Zeros in this rank's shard (past the end of a bucket)."""
        return self.shard - sum(b - a for _, a, b in self.pieces)

    def unshard(self, rows: np.ndarray) -> list[np.ndarray]:
        """Every variable's flat elements from every rank's shard (``rows``: N x shard, in rank order)."""
        out = [np.empty(n, rows.dtype) for n in self.sizes]
        for rank in range(self.size):
            for index, a, b, at in self.segments(rank):
                out[index][a:b] = rows[rank, at : at + b - a]
        return out

    def own(self, flats: Sequence[np.ndarray]) -> np.ndarray:
        """This rank's shard of ``flats`` (every variable's flat elements), zeros where it is padding."""
        dtype = flats[0].dtype if flats else np.float32
        mine = np.zeros(self.shard, dtype)
        for index, a, b, at in self.segments():
            mine[at : at + b - a] = flats[index][a:b]
        return mine


class ShardedOptimizer:
    """A model's optimizer built over this rank's flat shard, and the sharded update of one step."""

    def __init__(self, model: Any, sync: Any, strategy: Any, bucket_mb: float = 0.0) -> None:
        """``sync``: the process's :class:`tfdist.sync.mpi.MPISync` (its communicator and waiter);
        ``bucket_mb``: see :func:`bucket_choice`."""
        import keras

        self.model, self.sync, self.strategy = model, sync, strategy
        self.optimizer = model.optimizer
        check_optimizer(self.optimizer)
        self.targets = list(model.trainable_variables)
        bad = [v.path for v in self.targets if str(v.dtype) != "float32"]
        if bad:
            raise ConfigError(f"shard_optimizer needs float32 trainable variables; {bad[0]} is not. {HINT}.")
        sizes = tuple(int(np.prod(v.shape)) for v in self.targets)
        # Buckets only where there is someone to scatter to; one bucket is the unbucketed layout.
        planned = plan_buckets([4 * n for n in sizes], bucket_mb * 2**20) if sync.size > 1 else []
        buckets = tuple(tuple(b) for b in planned) if len(planned) > 1 else ()
        self.layout = ShardLayout(sizes, sync.rank, sync.size, buckets)
        #: What the reduce-scatter sends: the backend's wire (configured from ``compression``, else
        #: TFDIST_COMPRESSION; ``none`` when the job is on one node, as for unsharded steps).
        self.compression: str = sync.options.compression
        # The shard's own communicator (made here, at the same point on every rank): its collectives run on
        # the coordinator's thread (buckets) or the step's, never meeting another thread's on one comm.
        self.comm = sync.comm.Dup() if sync.size > 1 else sync.comm
        self._traces = 0  # traced bucketed steps: names their reduce-scatters, the same on every rank
        self._mark: Callable[[str], None] | None = None  # a timeline's stamps of each bucket
        if buckets:
            sync.register([SCATTER], self._execute)
        if sync.rank == 0 and sync.size > 1:
            how = f"in {len(buckets)} buckets during" if buckets else "in one piece after"
            log.info(
                "shard_optimizer: %d weights in %d shards of %d; gradients reduce-scattered as %s %s the "
                "backward pass, weights all-gathered as float32",
                self.layout.total,
                sync.size,
                self.layout.shard,
                "float32" if self.compression == "none" else self.compression,
                how,
            )
        key = (self.layout, tuple(id(v) for v in self.targets))
        previous = _SHARDS.get(id(self.optimizer))
        if previous is not None and previous[0]() is self.optimizer and previous[1] == key:
            self.variable = previous[2]  # a second fit of the same model: the same shard and slots
            return
        if self.optimizer.built:
            raise ConfigError(
                "shard_optimizer needs an optimizer that has not been built over the model's variables "
                "(it was built or used before). Hint: compile the model again with a new optimizer."
            )
        with strategy.scope():
            self.variable = keras.Variable(
                np.zeros(self.layout.shard, np.float32), name=SHARD_NAME, trainable=True
            )
        # Kept beside the optimizer, not on it: an attribute would make the shard one of its variables.
        _SHARDS[id(self.optimizer)] = (weakref.ref(self.optimizer), key, self.variable)

    @property
    def variables(self) -> list[Any]:
        """What the optimizer is built over: the one flat shard."""
        return [self.variable]

    # -- the step ---------------------------------------------------------------------------------------

    def apply(self, grads: Sequence[Any], sums: Any, stamps: Any = None) -> Any:
        """Graph ops of one replica step: reduce-scatter ``grads`` (and all-reduce ``sums``), update this
        rank's shard, all-gather the shards into the model's variables. Returns the job's ``sums``.
        ``stamps``: a timeline's :class:`tfdist.train.timeline.ShardStamps`, or None."""
        import tensorflow as tf

        layout = self.layout
        dense = [
            tf.cast(tf.convert_to_tensor(g), tf.float32)
            if g is not None
            else tf.zeros(t.shape, tf.float32)  # a weight the loss does not reach: a zero gradient
            for g, t in zip(grads, self.targets, strict=True)
        ]
        sums = tf.cast(sums, tf.float32)
        if layout.buckets:
            mine, summed = self._bucketed(dense, sums, stamps)
        else:
            if stamps is not None:
                *dense, sums = stamps.before([*dense, sums])
            mine, summed = tf.numpy_function(
                self._reduce_scatter, [*dense, sums], [tf.float32, tf.float32], stateful=True
            )
        if stamps is not None:
            mine, summed = stamps.after([mine, summed])
        mine = tf.ensure_shape(mine, [layout.shard])
        # The shard starts from the current weights each step: whatever set them (the first broadcast, a
        # restore, a callback's set_weights) is what the update continues from.
        self.variable.assign(self._own_slice())
        self.optimizer.apply_gradients([(mine, self.variable)])
        full = tf.numpy_function(
            self._allgather, [self.variable.value], [tf.float32] * len(self.targets), stateful=True
        )
        for target, flat in zip(self.targets, full, strict=True):
            target.assign(tf.reshape(flat, target.shape))
        return tf.ensure_shape(summed, sums.shape)

    def _own_slice(self) -> Any:
        """This rank's shard of the current weights (graph ops), zeros where it is padding."""
        import tensorflow as tf

        parts, at = [], 0
        for index, a, b, where in self.layout.segments():
            if where > at:
                parts.append(tf.zeros([where - at], tf.float32))
            parts.append(tf.reshape(self.targets[index], [-1])[a:b])
            at = where + b - a
        if self.layout.shard > at:
            parts.append(tf.zeros([self.layout.shard - at], tf.float32))
        return tf.concat(parts, 0)

    def _reduce_scatter(self, *arrays: np.ndarray) -> list[np.ndarray]:
        """Without buckets: the gradients summed and scattered (packed here into one send buffer, not by a
        concat in the graph), the metric sums all-reduced beside them."""
        sync, mpi = self.sync, self.sync.mpi
        *grads, sums = arrays
        if self.compression != "none" and sync.size > 1:
            return self._reduce_scatter_16(grads, sums)
        flat = self._pack(0, grads, np.float32)
        if sync.size == 1:
            return [flat, sums.copy()]
        mine, summed = np.empty(self.layout.shard, np.float32), np.empty_like(sums)
        sync.watch.begin("the sharded optimizer's gradient reduce-scatter")
        scatter = self.comm.Ireduce_scatter_block(flat, mine, op=mpi.SUM)
        metrics = self.comm.Iallreduce(np.ascontiguousarray(sums), summed, op=mpi.SUM)
        sync.reducer.waiter.wait(scatter)
        sync.reducer.waiter.wait(metrics)
        self._count(flat.nbytes)
        return [mine, summed]

    def _reduce_scatter_16(self, grads: Sequence[np.ndarray], sums: np.ndarray) -> list[np.ndarray]:
        """:meth:`_reduce_scatter` with the gradients rounded to 16 bits on the wire (packed straight into
        the 16-bit send buffer: no float32 copy of the flat gradient); the metric sums stay float32."""
        sync, mpi = self.sync, self.sync.mpi
        sent = self._pack(0, grads, np.uint16)
        summed = np.empty_like(sums)
        sync.watch.begin("the sharded optimizer's 16-bit gradient reduce-scatter")
        metrics = self.comm.Iallreduce(np.ascontiguousarray(sums), summed, op=mpi.SUM)
        mine = scatter_sum_16(self.comm, sent, self.compression, sync.reducer.waiter)
        sync.reducer.waiter.wait(metrics)
        self._count(sent.nbytes)
        return [mine, summed]

    def _pack(self, bucket: int, grads: Sequence[np.ndarray], dtype: Any) -> np.ndarray:
        """Bucket ``bucket``'s send buffer: its gradients (in the bucket's order) one after another, padded
        with zeros to N slices; ``uint16``: rounded to the wire's 16 bits (+0.0 pads in both formats)."""
        width = self.layout.slices[bucket]
        buffer = np.empty(width * self.layout.size, dtype)
        at = 0
        for grad in grads:
            flat = grad.reshape(-1)
            if dtype == np.uint16:  # float32 in: rounded here; 16-bit in (cast in the graph): their bits
                flat = (flat if flat.dtype.itemsize == 2 else encode(flat, self.compression)).view(np.uint16)
            buffer[at : at + flat.size] = flat
            at += flat.size
        buffer[at:] = 0
        return buffer

    def _count(self, nbytes: int) -> None:
        """The timeline's bytes across nodes (which it counts as all-reduced buffers): a reduce-scatter or
        an all-gather of a buffer moves half of what an all-reduce of it moves, so each counts half of its
        buffer (the gradients as the wire sends them, the float32 weights back)."""
        reducer = self.sync.reducer
        if reducer.cross.Get_size() > 1:
            reducer.crossed += nbytes // 2

    # -- buckets: each reduce-scattered by the coordinator as soon as the backward pass produced it ----

    def _bucketed(self, dense: list[Any], sums: Any, stamps: Any) -> tuple[Any, Any]:
        """Graph ops: one op per bucket hands it to the coordinator when its gradients exist (and returns
        at once), one hands over the metric sums, and the last waits for them all: (shard, sums)."""
        import tensorflow as tf

        self._mark = stamps.mark if stamps is not None else None
        self._traces += 1
        tag = f"tfdist.shard{self._traces}"
        # 16-bit gradients are cast in the graph: TensorFlow's casts are faster than NumPy's float16
        # conversion on the core the step computes on (as for unsharded buckets).
        wire = {"none": tf.float32, "fp16": tf.float16, "bf16": tf.bfloat16}[self.compression]
        compression = self.compression
        tickets = [
            tf.numpy_function(
                lambda *arrays, n=number: self._submit(f"{tag}/b{n}", arrays, (compression, n)),
                [tf.cast(dense[i], wire) for i in group],
                tf.int64,
                stateful=True,
            )
            for number, group in enumerate(self.layout.groups)
        ]
        tickets.append(
            tf.numpy_function(
                lambda total: self._submit(f"{tag}/sums", [total], ("sums", -1)),
                [sums],
                tf.int64,
                stateful=True,
            )
        )
        if stamps is not None:  # the backward pass is over: made after the sends, which it must not hold
            ready = stamps.ready
            with tf.control_dependencies([*dense, sums]):
                tickets.append(
                    tf.numpy_function(lambda: np.int64(ready() or -1), [], tf.int64, stateful=True)
                )
        mine, summed = tf.numpy_function(self._collect, tickets, [tf.float32, tf.float32], stateful=True)
        return mine, summed

    def _submit(self, name: str, arrays: Sequence[np.ndarray], args: tuple[str, int]) -> np.int64:
        if self._mark is not None and args[1] >= 0:
            self._mark(f"sent {name.rsplit('/', 1)[-1]}")
        return np.int64(self.sync.coordinator.submit(Request(name, SCATTER, list(arrays), args=args)))

    def _execute(self, requests: list[Request]) -> None:
        """On the coordinator's thread, in the order every rank agreed: each bucket reduce-scattered (one
        all-to-all and a float32 sum of the slice with the 16-bit wire), the metric sums all-reduced."""
        sync, mpi = self.sync, self.sync.mpi
        for request in requests:
            kind, number = request.args
            if kind == "sums":
                (total,) = request.arrays
                summed = np.empty_like(total)
                metrics = self.comm.Iallreduce(np.ascontiguousarray(total), summed, op=mpi.SUM)
                sync.reducer.waiter.wait(metrics)
                request.result = [summed]
                continue
            if kind == "none":
                sent = self._pack(number, request.arrays, np.float32)
                mine = np.empty(self.layout.slices[number], np.float32)
                sync.background.wait(self.comm.Ireduce_scatter_block(sent, mine, op=mpi.SUM))
            else:
                sent = self._pack(number, request.arrays, np.uint16)
                mine = scatter_sum_16(self.comm, sent, kind, sync.background)
            # The bucket's gradients are not needed any more: let TensorFlow's buffers go (stage 2).
            request.arrays = []
            request.result = [mine]
            self._count(sent.nbytes)
            if self._mark is not None:
                self._mark(f"summed b{number}")

    def _collect(self, *tickets: np.int64) -> list[np.ndarray]:
        """Wait for every bucket and the metric sums: this rank's shard of the summed gradients, and the
        job's sums."""
        results = []
        for ticket in tickets:
            if ticket < 0:  # the timeline's stamp, not a collective
                continue
            done = self.sync.coordinator.wait(int(ticket))
            if done.error:
                raise RuntimeError(done.error)
            results.append(done.result[0])
        *slices, summed = results
        return [np.concatenate(slices), summed]

    def _allgather(self, mine: np.ndarray) -> list[np.ndarray]:
        """Every rank's updated shard, as each variable's flat elements."""
        sync = self.sync
        mine = np.ascontiguousarray(mine, np.float32)
        if sync.size == 1:
            rows = mine.reshape(1, -1)
        else:
            rows = np.empty((sync.size, self.layout.shard), np.float32)
            sync.watch.begin("the sharded optimizer's all-gather of the updated weights")
            sync.reducer.waiter.wait(self.comm.Iallgather(mine, rows))
            self._count(rows.nbytes)
        return self.layout.unshard(rows)

    # -- checkpoints: the whole optimizer, in the unsharded format -------------------------------------

    def _slots(self) -> dict[str, Any]:
        """This rank's slot variables by slot name (``momentum``, ``velocity`` …)."""
        marker = f"{SHARD_NAME}_"
        return {
            v.path.rsplit("/", 1)[-1][len(marker) :]: v
            for v in self.optimizer.variables
            if v.path.rsplit("/", 1)[-1].startswith(marker)
        }

    def _full_slots(self, full: Any, names: Sequence[str]) -> dict[str, list[Any]]:
        """The full-size optimizer's slot of each model variable, by slot name, in the variables' order."""
        by_path = {v.path.split("/", 1)[-1]: v for v in full.variables}
        out: dict[str, list[Any]] = {}
        for name in names:
            wanted_paths = [f"{t.path.replace('/', '_')}_{name}" for t in self.targets]
            missing = [p for p in wanted_paths if p not in by_path]
            if missing:
                raise ConfigError(
                    f"shard_optimizer: the optimizer's slot {missing[0]} was not found. {HINT}."
                )
            out[name] = [by_path[p] for p in wanted_paths]
        return out

    @contextlib.contextmanager
    def whole(self, gather: bool) -> Iterator[Any]:
        """A full-size copy of the optimizer that the model points to while the block runs, for a
        checkpoint in the unsharded format.

        ``gather=True`` (a save): every rank sends its slots to the chief, which gets the copy filled;
        the other ranks get None. ``gather=False`` (a restore): every rank gets an empty copy to restore
        into, then :meth:`keep_slice` keeps its slice.
        """
        is_chief = self.sync.rank == 0
        if gather and not is_chief:
            for variable in self._slots().values():
                self._gather(variable.numpy())
            yield None
            return
        full = self._full_copy()
        slots = self._slots()
        full_slots = self._full_slots(full, list(slots))
        if gather:
            for name, variable in slots.items():
                rows = self._gather(variable.numpy())
                assert rows is not None
                flats = self.layout.unshard(rows)
                for target, slot, flat in zip(self.targets, full_slots[name], flats, strict=True):
                    slot.assign(flat.reshape(target.shape))
            self._copy_scalars(self.optimizer, full, _ids(slots, full_slots))
        previous = self.model.optimizer
        self.model.optimizer = full  # the model's checkpoint names its optimizer: the whole one, once
        try:
            yield full
        finally:
            self.model.optimizer = previous

    def keep_slice(self, full: Any) -> None:
        """After a restore into :meth:`whole`'s copy: this rank's slice of each slot, and the scalars."""
        slots = self._slots()
        full_slots = self._full_slots(full, list(slots))
        for name, variable in slots.items():
            flats = [slot.numpy().reshape(-1) for slot in full_slots[name]]
            variable.assign(self.layout.own(flats))
        self._copy_scalars(full, self.optimizer, _ids(slots, full_slots))

    @staticmethod
    def _copy_scalars(source: Any, target: Any, skip: set[int]) -> None:
        """The optimizer's variables that are not slots (iterations, learning rate …), in their order."""
        src = [v for v in source.variables if id(v) not in skip]
        dst = [v for v in target.variables if id(v) not in skip]
        if len(src) != len(dst):
            raise ConfigError(f"shard_optimizer: the optimizer's variables do not pair up. {HINT}.")
        for s, d in zip(src, dst, strict=True):
            d.assign(s.value)

    def _full_copy(self) -> Any:
        """A new optimizer of the same kind and settings, built over the model's own variables."""
        optimizer = self.optimizer
        try:
            with self.strategy.scope():
                full = type(optimizer).from_config(optimizer.get_config())
                full.build(self.targets)
        except (TypeError, ValueError) as exc:
            raise ConfigError(
                f"shard_optimizer: the optimizer cannot be copied for a checkpoint ({exc})."
            ) from None
        return full

    def _gather(self, mine: np.ndarray) -> np.ndarray | None:
        """Every rank's shard as the rows of an N x shard array on the chief (None elsewhere)."""
        sync = self.sync
        mine = np.ascontiguousarray(mine, np.float32)
        if sync.size == 1:
            return mine.reshape(1, -1)
        rows = np.empty((sync.size, self.layout.shard), np.float32) if sync.rank == 0 else None
        sync.watch.begin("the sharded optimizer's gather of its slots for a checkpoint")
        sync.reducer.waiter.wait(self.comm.Igather(mine, rows, root=0))
        return rows


def scatter_sum_16(comm: Any, sent: np.ndarray, compression: str, waiter: Any) -> np.ndarray:
    """This rank's slice of the sum over ``comm`` of every rank's ``sent`` (16-bit floats as their bits,
    ``uint16``, a multiple of the rank count long), as float32.

    One all-to-all: slice j of every rank's buffer goes to rank j, which decodes the halves and adds them
    in float32 in rank order (the reduce-scatter half of :func:`tfdist.sync.reduce.cross_sum_bits`). The
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


def _ids(slots: dict[str, Any], full_slots: dict[str, list[Any]]) -> set[int]:
    """The ids of every slot variable, sharded and whole: what is not a scalar of the optimizer."""
    return {id(v) for v in slots.values()} | {id(v) for vs in full_slots.values() for v in vs}


def open_shard(model: Any, strategy: Any, options: Any) -> ShardedOptimizer | None:
    """The sharded optimizer of this run, or None when sharding is not asked for; ConfigError (one line,
    before anything is written) when it cannot be done. ``options``: ``tfdist.fit``'s (``shard_optimizer``,
    ``bucket_mb``; ``compression`` reaches the backend first, see :mod:`tfdist.train.entry`)."""
    if not wanted(options.shard_optimizer):
        return None
    from tfdist import context
    from tfdist.sync import process_sync

    check_backend(context.current().backend)
    sync = process_sync("mpi")
    return ShardedOptimizer(model, sync, strategy, bucket_choice(options.bucket_mb, sync.options.bucket_size))
