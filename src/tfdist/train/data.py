"""Input pipelines with exact global-batch semantics: every worker builds the same global batches (same seed,
same order) and keeps its own slice; a partial last batch is padded with zero-weight rows. Batches reach the
step as ``(x, y, w, s)`` (:mod:`tfdist.train.batches`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from tfdist.errors import ConfigError
from tfdist.train.batches import check_arrays, own_plan, plan_batches, static_batch, weighted
from tfdist.train.uneven import OwnData, empty_batches, own_data, own_dataset


class DistributedData:
    """Turns numpy arrays or a globally batched tf.data.Dataset into per-epoch distributed iterators."""

    def __init__(
        self,
        strategy: Any,
        source: Any,
        *,
        batch_size: int | None,
        steps_per_epoch: int | None,
        shuffle: bool,
        seed: int,
        processes: tuple[int, int] = (0, 1),
        class_weights: Any = None,
        table: Callable[[np.ndarray], np.ndarray] | None = None,
        per_worker: bool | None = False,
    ) -> None:
        """``table``: the synchroniser's :meth:`~tfdist.sync.base.Synchroniser.table`; ``per_worker``: whether
        each worker's data is its own (:mod:`tfdist.train.uneven`), None to decide it with ``table``."""
        import tensorflow as tf

        self.strategy = strategy
        self.own: OwnData | None = None  # set when each worker's data is its own
        # (index, count) of processes that each run their own strategy (the MPI backend).
        self.process, self.processes = processes
        self.replicas = strategy.num_replicas_in_sync * self.processes
        self.shuffle, self.seed, self.class_weights = shuffle, seed, class_weights
        self.arrays: tuple[np.ndarray, ...] | None = None
        self.dataset: Any = None
        self.dataset_fn: Callable[[Any], Any] | None = None
        self._tensors: tuple[Any, ...] | None = None
        if isinstance(source, tuple | list):
            self.arrays = check_arrays(source)
            if batch_size is None:
                raise ConfigError("NumPy inputs need batch_size= (the GLOBAL batch size).")
            examples = len(self.arrays[0])
            self.own = own_data(self.arrays, batch_size, steps_per_epoch, table, per_worker)
            if self.own is not None:
                self.plan = own_plan(self.own, self.replicas)
            else:
                self.plan = plan_batches(batch_size, self.replicas, examples, steps_per_epoch)
        elif isinstance(source, tf.data.Dataset):
            spec = source.element_spec
            if not isinstance(spec, tuple) or len(spec) not in (2, 3):
                raise ConfigError(
                    "dataset elements must be (features, labels) or (features, labels, sample_weights); "
                    f"got {type(spec).__name__} {spec}."
                )
            if class_weights is not None and len(spec) == 3:
                raise ConfigError(
                    "class_weight and sample weights (the dataset's third element) cannot be used together "
                    "(as in Keras). Hint: fold the class weights into the sample weights."
                )
            self.dataset = source
            self.own = own_dataset(source, batch_size, steps_per_epoch, table, per_worker, static_batch)
            if self.own is not None:
                self.plan = own_plan(self.own, self.replicas)
            else:
                global_batch = batch_size or static_batch(source)
                cardinality = int(source.cardinality().numpy())  # batches, a partial last one included
                known = cardinality * global_batch if cardinality >= 0 else None
                self.plan = plan_batches(global_batch, self.replicas, known, steps_per_epoch)
        elif callable(source):
            if steps_per_epoch is None or batch_size is None:
                raise ConfigError(
                    "a dataset_fn needs steps_per_epoch= and batch_size= (the GLOBAL batch) so all "
                    "workers run the same steps."
                )
            self.dataset_fn = source
            self.plan = plan_batches(batch_size, self.replicas, None, steps_per_epoch)
        else:
            raise ConfigError(
                f"training data of type {type(source).__name__} is not supported; pass a tf.data.Dataset, "
                "a dataset_fn(input_context) or NumPy (x, y) with batch_size."
            )

    def _array_batches(self, epochs: Any) -> Any:
        """Index batches for the given epochs, epoch e's order seeded by (seed, e): the same everywhere."""
        import tensorflow as tf

        assert self.arrays is not None
        n, plan, seed, shuffle, own = len(self.arrays[0]), self.plan, self.seed, self.shuffle, self.own
        size = own.batch if own else plan.global_batch  # the rows this worker's data gives each step

        def one_epoch(epoch: Any) -> Any:
            order = tf.range(n, dtype=tf.int64)
            if shuffle:
                order = tf.random.experimental.stateless_shuffle(
                    order, seed=tf.stack([tf.constant(seed, tf.int64), epoch])
                )
            # -1 marks a zero-weight padding row (a worker whose own data ran out steps on padding only).
            pad = own.padding(n) if own else -n % plan.global_batch
            order = tf.concat([order, -tf.ones([pad], tf.int64)], 0)
            batches = tf.data.Dataset.from_tensor_slices(order).batch(size, drop_remainder=True)
            # steps_per_epoch may ask for more batches than the data holds: cycle this epoch's order.
            return batches.repeat().take(plan.steps_per_epoch)

        return epochs.flat_map(one_epoch)

    def _shares(self, index: Any) -> Any:
        """A global batch of indices -> (indices, each row's share of the batch's loss)."""
        import tensorflow as tf

        real = tf.cast(index >= 0, tf.float32)
        return index, real if self.own else real / tf.maximum(tf.reduce_sum(real), 1.0)

    def _gather(self, index: Any, share: Any) -> Any:
        import tensorflow as tf

        assert self._tensors is not None
        safe = tf.maximum(index, 0)
        x, y = (tf.gather(t, safe) for t in self._tensors)
        w = tf.cast(index >= 0, tf.float32)
        if self.class_weights is not None:
            from tfdist.train.weights import class_weights_of

            w *= class_weights_of(self.class_weights, y)
        return x, y, w, share

    def _user_batches(self) -> Any:
        if self.own is not None:  # this worker's batches, padded after its end (or cycled)
            own = self.own
            ds = self.dataset.map(weighted(1, self.class_weights)).map(self._pad_batch)  # share 1: see uneven
            if own.cycle:
                return ds.repeat().take(own.steps)
            padded = ds.concatenate(empty_batches(ds.element_spec, own.batch))
            # An unknown length: endless, the loop ends the epoch when no worker has a real row left.
            return padded if own.steps is None else padded.take(own.steps)
        batches = self.dataset.map(weighted(None, self.class_weights))
        return batches.map(self._pad_batch).take(self.plan.steps_per_epoch)

    def _pad_batch(self, x: Any, y: Any, w: Any, s: Any) -> Any:
        """A partial batch gets zero-weight, zero-share rows: every replica has a share."""
        import tensorflow as tf

        rows = self.own.batch if self.own else self.plan.global_batch
        extra = rows - tf.shape(w)[0]

        def pad(t: Any) -> Any:
            return tf.pad(t, [[0, extra]] + [[0, 0]] * (t.shape.rank - 1))

        return tf.nest.map_structure(pad, x), tf.nest.map_structure(pad, y), pad(w), pad(s)

    def iterate(self, first_epoch: int, epochs: int, skip: int = 0) -> Iterator[Any]:
        """One iterator over the distributed batches of ``first_epoch..epochs-1``, after ``skip`` batches."""
        import tensorflow as tf

        if self.dataset_fn is not None:
            user_fn = self.dataset_fn

            def from_user(ctx: Any) -> Any:
                if self.processes > 1:  # MPI ranks: the strategy only knows this process's pipelines
                    ctx = tf.distribute.InputContext(
                        num_input_pipelines=ctx.num_input_pipelines * self.processes,
                        input_pipeline_id=self.process * ctx.num_input_pipelines + ctx.input_pipeline_id,
                        num_replicas_in_sync=self.replicas,
                    )
                ds = user_fn(ctx).map(weighted(self.plan.global_batch, self.class_weights))
                return ds.repeat().skip(skip)

            return iter(self.strategy.distribute_datasets_from_function(from_user))
        plan = self.plan
        if self.arrays is not None and self._tensors is None:
            self._tensors = tuple(tf.constant(a) for a in self.arrays)

        def per_worker(ctx: Any) -> Any:
            pipelines = ctx.num_input_pipelines * self.processes
            local = plan.per_replica * (self.replicas // pipelines)
            start = (self.process * ctx.num_input_pipelines + ctx.input_pipeline_id) * local
            if self.own is not None:  # this worker's batches are all its own: nothing to slice
                start = 0
            epoch_range = tf.data.Dataset.range(first_epoch, epochs)
            if self.arrays is not None:
                # Slice the indices first: each worker gathers only its own examples.
                ds = self._array_batches(epoch_range).skip(skip).map(self._shares)
                ds = ds.map(lambda idx, share: (idx[start : start + local], share[start : start + local]))
                ds = ds.map(self._gather, num_parallel_calls=tf.data.AUTOTUNE)
            else:
                ds = epoch_range.flat_map(lambda _: self._user_batches()).skip(skip)
                ds = ds.map(lambda *t: tuple(tf.nest.map_structure(lambda v: v[start : start + local], t)))
            if local != plan.per_replica:
                ds = ds.unbatch().batch(plan.per_replica, drop_remainder=True)
            # Endless, as it must look: with a finite length every get_next of a multi-worker strategy runs
            # an extra all-reduce to agree on whether data remains. The loop takes the planned steps.
            return ds.repeat().prefetch(tf.data.AUTOTUNE)

        options = tf.distribute.InputOptions(experimental_fetch_to_device=True)
        return iter(self.strategy.distribute_datasets_from_function(per_worker, options))

    def epoch(self, epoch: int, skip: int = 0) -> Iterator[Any]:
        """Iterator over one epoch's distributed batches (used for evaluation)."""
        return self.iterate(epoch, epoch + 1, skip)

    @property
    def dynamic(self) -> bool:
        """Whether an epoch's length is not known yet (each worker's own data, of unknown length)."""
        return self.own is not None and self.own.steps is None

    def learn(self, steps: int) -> None:
        """The epoch's length, told by the first epoch (:attr:`dynamic` is False from now on)."""
        assert self.own is not None
        self.own = self.own.learnt(steps)
        self.plan = own_plan(self.own, self.replicas)

    def has_rows(self, batch: Any) -> bool:
        """Whether this worker's part of a distributed ``(x, y, w, s)`` batch holds a real row."""
        return any(np.asarray(s).any() for s in self.strategy.experimental_local_results(batch[3]))

    def stream(
        self, iterator: Iterator[Any], agree: Callable[[bool], bool], skip: int = 0
    ) -> Iterator[tuple[Any, bool]]:
        """One epoch's ``(batch, last)`` pairs from ``iterator`` after ``skip``: the planned steps, or
        (:attr:`dynamic`) until no worker's next batch holds rows (``agree``: the same answer everywhere)."""
        if not self.dynamic:
            steps = self.plan.steps_per_epoch
            for done in range(skip, steps):
                batch = next(iterator, None)
                if batch is None:  # the pipelines are endless; a user's dataset_fn may not be
                    return
                yield batch, done + 1 == steps
            return
        upcoming = next(iterator)  # own data are padded endlessly (OwnData.batches)
        if not agree(self.has_rows(upcoming)):
            return
        while True:
            batch, upcoming = upcoming, next(iterator)
            last = not agree(self.has_rows(upcoming))
            yield batch, last
            if last:
                return
