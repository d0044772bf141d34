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

The collectives are plain MPI over the backend's communicator (``sync.comm``), not its shared-memory
all-reduce: a reduce-scatter and an all-gather move the same bytes as one all-reduce between them. The
all-gather of the updated weights is float32 whatever the wire: every rank must hold the same exact weights.
Gradient buckets (``bucket_mb``) do not apply: the reduce-scatter starts once the backward pass is over;
an explicit request for them is refused, the MPI backend's default across nodes is left unused.
Every wait goes through the backend's :class:`~tfdist.sync.reduce.Waiter` (polled, with the collective
timeout) and each collective is named for a timeout's line.

Checkpoints stay whole (:meth:`ShardedOptimizer.whole`): at a save the slots are gathered to the chief
into a full-size copy of the optimizer, written in the unsharded format; a restore reads that format and
keeps each rank's slice, so a checkpoint moves between rank counts and between sharded and unsharded runs.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tfdist import variables
from tfdist._log import get_logger
from tfdist.errors import ConfigError
from tfdist.sync.wire import decode, encode

log = get_logger(__name__)

#: Optimizers whose update is element-wise (Keras 3 class names); their slots are sliced with the weights.
ELEMENTWISE = ("SGD", "Adam", "AdamW", "RMSprop")
#: The flat variable the optimizer is built over; its slots are named ``<optimizer>/tfdist_shard_<slot>``.
SHARD_NAME = "tfdist_shard"
HINT = "Hint: leave shard_optimizer out (or TFDIST_SHARD_OPTIMIZER=0)"
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


def check_buckets(bucket_mb: float | None) -> None:
    """ConfigError when gradient buckets are asked for with sharding (``tfdist.fit``'s ``bucket_mb``, else
    TFDIST_BUCKET_MB when set): the reduce-scatter sends the gradients in one piece after the backward
    pass. The 16-bit wire (``compression``) combines with sharding; TFDIST_BUCKET_MB's default is not a
    request."""
    if bucket_mb is None and variables.is_set("TFDIST_BUCKET_MB"):
        bucket_mb = float(variables.get("TFDIST_BUCKET_MB"))
    if (bucket_mb or 0) > 0:
        raise ConfigError(
            f"shard_optimizer does not combine with bucket_mb={bucket_mb!r}: its reduce-scatter sends the "
            "gradients in one piece after the backward pass. Hint: drop bucket_mb (and TFDIST_BUCKET_MB), "
            "or leave shard_optimizer out."
        )


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
    """Where one rank's shard lies in the flat vector of every trainable weight (pure).

    Input/Output: ``ShardLayout((6, 3), rank=1, size=2)``: P = 9 padded to 10, shards of 5; rank 1 owns
    flat elements 5..9, i.e. ``pieces == ((0, 5, 6), (1, 0, 3))`` (variable, start, stop) and 1 padding.
    """

    sizes: tuple[int, ...]
    rank: int
    size: int

    def __post_init__(self) -> None:
        if not self.sizes or sum(self.sizes) == 0:
            raise ConfigError(
                "shard_optimizer: the model has no trainable weights; there is nothing to shard."
            )
        if not 0 <= self.rank < self.size:
            raise ValueError(f"rank {self.rank} is not in a job of {self.size}")

    @property
    def total(self) -> int:
        """P: every trainable element."""
        return sum(self.sizes)

    @property
    def shard(self) -> int:
        """Elements per rank (P / N rounded up)."""
        return -(-self.total // self.size)

    @property
    def padded(self) -> int:
        """P padded to N shards."""
        return self.shard * self.size

    @property
    def offsets(self) -> tuple[int, ...]:
        """Where each variable starts in the flat vector."""
        return tuple(int(x) for x in np.cumsum((0, *self.sizes[:-1])))

    @property
    def pieces(self) -> tuple[tuple[int, int, int], ...]:
        """(variable, start, stop) in that variable's own flat elements, for each variable the shard meets."""
        lo, hi = self.rank * self.shard, (self.rank + 1) * self.shard
        out = []
        for index, (start, n) in enumerate(zip(self.offsets, self.sizes, strict=True)):
            a, b = max(lo, start), min(hi, start + n)
            if a < b:
                out.append((index, a - start, b - start))
        return tuple(out)

    @property
    def padding(self) -> int:
        """Zeros at the end of this rank's shard (past P)."""
        return self.shard - sum(b - a for _, a, b in self.pieces)


class ShardedOptimizer:
    """A model's optimizer built over this rank's flat shard, and the sharded update of one step."""

    def __init__(self, model: Any, sync: Any, strategy: Any) -> None:
        """``sync``: the process's :class:`tfdist.sync.mpi.MPISync` (its communicator and waiter)."""
        import keras

        self.model, self.sync, self.strategy = model, sync, strategy
        self.optimizer = model.optimizer
        check_optimizer(self.optimizer)
        self.targets = list(model.trainable_variables)
        bad = [v.path for v in self.targets if str(v.dtype) != "float32"]
        if bad:
            raise ConfigError(f"shard_optimizer needs float32 trainable variables; {bad[0]} is not. {HINT}.")
        self.layout = ShardLayout(tuple(int(np.prod(v.shape)) for v in self.targets), sync.rank, sync.size)
        #: What the reduce-scatter sends: the backend's wire (configured from ``compression``, else
        #: TFDIST_COMPRESSION; ``none`` when the job is on one node, as for unsharded steps).
        self.compression: str = sync.options.compression
        if sync.rank == 0 and sync.size > 1:
            log.info(
                "shard_optimizer: %d weights in %d shards of %d; gradients reduce-scattered as %s in one "
                "piece after the backward pass (no buckets), weights all-gathered as float32",
                self.layout.total,
                sync.size,
                self.layout.shard,
                "float32" if self.compression == "none" else self.compression,
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

    def apply(self, grads: Sequence[Any], sums: Any) -> Any:
        """Graph ops of one replica step: reduce-scatter ``grads`` (and all-reduce ``sums``), update this
        rank's shard, all-gather the shards into the model's variables. Returns the job's ``sums``."""
        import tensorflow as tf

        layout = self.layout
        dense = [
            tf.cast(tf.convert_to_tensor(g), tf.float32)
            if g is not None
            else tf.zeros(t.shape, tf.float32)  # a weight the loss does not reach: a zero gradient
            for g, t in zip(grads, self.targets, strict=True)
        ]
        mine, summed = tf.numpy_function(
            self._reduce_scatter, [*dense, tf.cast(sums, tf.float32)], [tf.float32, tf.float32], stateful=True
        )
        mine = tf.ensure_shape(mine, [layout.shard])
        # The shard starts from the current weights each step: whatever set them (the first broadcast, a
        # restore, a callback's set_weights) is what the update continues from.
        self.variable.assign(self._own_slice())
        self.optimizer.apply_gradients([(mine, self.variable)])
        full = tf.numpy_function(self._allgather, [self.variable.value], tf.float32, stateful=True)
        full = tf.ensure_shape(full, [layout.padded])
        for target, start, n in zip(self.targets, layout.offsets, layout.sizes, strict=True):
            target.assign(tf.reshape(full[start : start + n], target.shape))
        return tf.ensure_shape(summed, sums.shape)

    def _own_slice(self) -> Any:
        import tensorflow as tf

        parts = [tf.reshape(self.targets[i], [-1])[a:b] for i, a, b in self.layout.pieces]
        return tf.concat([*parts, tf.zeros([self.layout.padding], tf.float32)], 0)

    def _reduce_scatter(self, *arrays: np.ndarray) -> list[np.ndarray]:
        """The gradients summed and scattered (packed here into one send buffer, not by a concat in the
        graph), the metric sums all-reduced beside them."""
        sync, mpi = self.sync, self.sync.mpi
        *grads, sums = arrays
        layout = self.layout
        if self.compression != "none" and sync.size > 1:
            return self._reduce_scatter_16(grads, sums)
        flat = np.empty(layout.padded, np.float32)
        for grad, start, n in zip(grads, layout.offsets, layout.sizes, strict=True):
            flat[start : start + n] = grad.reshape(-1)
        flat[layout.total :] = 0.0
        if sync.size == 1:
            return [flat, sums.copy()]
        mine, summed = np.empty(layout.shard, np.float32), np.empty_like(sums)
        sync.watch.begin("the sharded optimizer's gradient reduce-scatter")
        scatter = sync.comm.Ireduce_scatter_block(flat, mine, op=mpi.SUM)
        metrics = sync.comm.Iallreduce(np.ascontiguousarray(sums), summed, op=mpi.SUM)
        sync.reducer.waiter.wait(scatter)
        sync.reducer.waiter.wait(metrics)
        return [mine, summed]

    def _reduce_scatter_16(self, grads: Sequence[np.ndarray], sums: np.ndarray) -> list[np.ndarray]:
        """:meth:`_reduce_scatter` with the gradients rounded to 16 bits on the wire (packed straight into
        the 16-bit send buffer: no float32 copy of the flat gradient); the metric sums stay float32."""
        sync, mpi, layout = self.sync, self.sync.mpi, self.layout
        sent = np.zeros(layout.padded, np.uint16)  # the padding is +0.0 in both formats
        for grad, start, n in zip(grads, layout.offsets, layout.sizes, strict=True):
            sent[start : start + n] = encode(grad.reshape(-1), self.compression).view(np.uint16)
        summed = np.empty_like(sums)
        sync.watch.begin("the sharded optimizer's 16-bit gradient reduce-scatter")
        metrics = sync.comm.Iallreduce(np.ascontiguousarray(sums), summed, op=mpi.SUM)
        mine = scatter_sum_16(sync.comm, sent, self.compression, sync.reducer.waiter)
        sync.reducer.waiter.wait(metrics)
        return [mine, summed]

    def _allgather(self, mine: np.ndarray) -> np.ndarray:
        """Every rank's updated shard, in rank order."""
        sync = self.sync
        if sync.size == 1:
            return np.array(mine, np.float32)
        full = np.empty(self.layout.padded, np.float32)
        sync.watch.begin("the sharded optimizer's all-gather of the updated weights")
        sync.reducer.waiter.wait(sync.comm.Iallgather(np.ascontiguousarray(mine, np.float32), full))
        return full

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
                flat = self._gather(variable.numpy())
                assert flat is not None
                for target, slot, start, n in zip(
                    self.targets, full_slots[name], self.layout.offsets, self.layout.sizes, strict=True
                ):
                    slot.assign(flat[start : start + n].reshape(target.shape))
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
            parts = [full_slots[name][i].numpy().reshape(-1)[a:b] for i, a, b in self.layout.pieces]
            variable.assign(np.concatenate([*parts, np.zeros(self.layout.padding, np.float32)]))
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
        """Every rank's shard, in rank order, on the chief (None elsewhere); P elements, padding cut."""
        sync = self.sync
        mine = np.ascontiguousarray(mine, np.float32)
        if sync.size == 1:
            return mine[: self.layout.total]
        full = np.empty(self.layout.padded, np.float32) if sync.rank == 0 else None
        sync.watch.begin("the sharded optimizer's gather of its slots for a checkpoint")
        sync.reducer.waiter.wait(sync.comm.Igather(mine, full, root=0))
        return None if full is None else full[: self.layout.total]


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
    check_buckets(options.bucket_mb)
    return ShardedOptimizer(model, process_sync("mpi"), strategy)
