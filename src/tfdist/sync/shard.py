"""Optimizer-state sharding (ZeRO stage 1) on the MPI backend: each rank keeps the optimizer's slots of
1/N of the weights.

The trainable weights are seen as one flat vector cut in N slices (per bucket: :class:`ShardLayout`); each
step the gradient is reduce-scattered (rank r receives the sum of its slice; through the 16-bit wire when
the job spans nodes and asks for it), the model's optimizer, built over the rank's flat slice, updates it,
and the updated slices are all-gathered as float32 into every rank's weights. Only element-wise optimizers
are accepted, so updating a slice is the arithmetic of updating the whole. With gradient buckets each
bucket is reduce-scattered by the coordinator's thread as soon as it exists and its gradients are released
(ZeRO stage 2's saving). Checkpoints stay whole (:mod:`tfdist.sync.shard_checkpoint`).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from tfdist import variables
from tfdist._log import get_logger
from tfdist.errors import ConfigError
from tfdist.sync import buckets
from tfdist.sync.reduce import scatter_sum_16
from tfdist.sync.request import Request
from tfdist.sync.shard_checkpoint import HINT, SHARD_NAME, WholeCheckpoint
from tfdist.sync.shard_layout import ShardLayout
from tfdist.sync.wire import AUTO, check_bucket_setting, encode, plan_buckets

log = get_logger(__name__)

#: Optimizers whose update is element-wise (Keras 3 class names); their slots are sliced with the weights.
ELEMENTWISE = ("SGD", "Adam", "AdamW", "RMSprop")
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


class ShardedOptimizer(WholeCheckpoint):
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
        groups = tuple(tuple(b) for b in planned) if len(planned) > 1 else ()
        self.layout = ShardLayout(sizes, sync.rank, sync.size, groups)
        #: What the reduce-scatter sends: the backend's wire (configured from ``compression``, else
        #: TFDIST_COMPRESSION; ``none`` when the job is on one node, as for unsharded steps).
        self.compression: str = sync.options.compression
        # The shard's own communicator (made here, at the same point on every rank): its collectives run on
        # the coordinator's thread (buckets) or the step's, never meeting another thread's on one comm.
        self.comm = sync.comm.Dup() if sync.size > 1 else sync.comm
        self._traces = 0  # traced bucketed steps: names their reduce-scatters, the same on every rank
        self._mark: Callable[[str], None] | None = None  # a timeline's stamps of each bucket
        if groups:
            sync.register([SCATTER], self._execute)
        if sync.rank == 0 and sync.size > 1:
            how = f"in {len(groups)} buckets during" if groups else "in one piece after"
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
        *grads, sums = arrays
        if self.sync.size == 1:
            return [self._pack(0, grads, np.float32), sums.copy()]
        wire = "" if self.compression == "none" else "16-bit "
        self.sync.watch.begin(f"the sharded optimizer's {wire}gradient reduce-scatter")
        summed = np.empty_like(sums)
        metrics = self.comm.Iallreduce(np.ascontiguousarray(sums), summed, op=self.sync.mpi.SUM)
        mine = self._scatter(0, grads, self.sync.reducer.waiter)
        self.sync.reducer.waiter.wait(metrics)
        return [mine, summed]

    def _scatter(self, bucket: int, grads: Sequence[np.ndarray], waiter: Any) -> np.ndarray:
        """Bucket ``bucket``'s gradients summed over the ranks: this rank's slice, float32."""
        if self.compression == "none":
            sent = self._pack(bucket, grads, np.float32)
            mine = np.empty(self.layout.slices[bucket], np.float32)
            waiter.wait(self.comm.Ireduce_scatter_block(sent, mine, op=self.sync.mpi.SUM))
        else:
            sent = self._pack(bucket, grads, np.uint16)
            mine = scatter_sum_16(self.comm, sent, self.compression, waiter)
        self._count(sent.nbytes)
        return mine

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
        an all-gather moves half of what an all-reduce of the same buffer moves."""
        reducer = self.sync.reducer
        if reducer.cross.Get_size() > 1:
            reducer.crossed += nbytes // 2

    def _bucketed(self, dense: list[Any], sums: Any, stamps: Any) -> tuple[Any, Any]:
        """Graph ops: one op per bucket hands it to the coordinator when its gradients exist (and returns
        at once), one hands over the metric sums, and the last waits for them all: (shard, sums)."""
        import tensorflow as tf

        self._mark = stamps.mark if stamps is not None else None
        self._traces += 1
        tag = f"tfdist.shard{self._traces}"
        # 16-bit gradients are cast in the graph, as for unsharded buckets (tfdist.sync.buckets).
        wire = getattr(tf, buckets.WIRE_TYPES[self.compression])
        tickets = [
            buckets.submit_op(
                lambda *arrays, n=number: self._submit(f"{tag}/b{n}", arrays, n),
                [tf.cast(dense[i], wire) for i in group],
            )
            for number, group in enumerate(self.layout.groups)
        ]
        tickets.append(buckets.submit_op(lambda total: self._submit(f"{tag}/sums", [total], -1), [sums]))
        if stamps is not None:
            tickets.append(buckets.ready_op(stamps.ready, [*dense, sums]))

        def collect(*tickets: np.int64) -> list[np.ndarray]:
            *slices, summed = [result[0] for result in buckets.collect(self.sync, tickets)]
            return [np.concatenate(slices), summed]

        mine, summed = tf.numpy_function(collect, tickets, [tf.float32, tf.float32], stateful=True)
        return mine, summed

    def _submit(self, name: str, arrays: Sequence[np.ndarray], bucket: int) -> np.int64:
        if self._mark is not None and bucket >= 0:
            self._mark(f"sent {name.rsplit('/', 1)[-1]}")
        request = Request(name, SCATTER, list(arrays), args=(self.compression, bucket))
        return np.int64(self.sync.coordinator.submit(request))

    def _execute(self, requests: list[Request]) -> None:
        """On the coordinator's thread, in the order every rank agreed: each bucket reduce-scattered, the
        metric sums all-reduced."""
        for request in requests:
            bucket = request.args[1]
            if bucket < 0:
                (total,) = request.arrays
                summed = np.empty_like(total)
                metrics = self.comm.Iallreduce(np.ascontiguousarray(total), summed, op=self.sync.mpi.SUM)
                self.sync.reducer.waiter.wait(metrics)
                request.result = [summed]
                continue
            request.result = [self._scatter(bucket, request.arrays, self.sync.background)]
            # The bucket's gradients are not needed any more: let TensorFlow's buffers go (stage 2).
            request.arrays = []
            if self._mark is not None:
                self._mark(f"summed b{bucket}")

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
