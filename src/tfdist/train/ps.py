"""``tfdist.fit`` under ParameterServerStrategy (which Keras 3's ``model.fit`` refuses): the chief schedules
asynchronous steps of one worker's batch through a ClusterCoordinator, counted by tfdist's own variable
(Keras 3's ``optimizer.iterations`` undercounts here).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tfdist.errors import ConfigError
from tfdist.sync.parameter_server import ParameterServer
from tfdist.sync.step import replica_eval_step, replica_train_step
from tfdist.train.batches import BatchPlan, check_arrays, full_batches, static_batch, weighted
from tfdist.train.loop import SyncTrainer


class ParameterServerTrainer(SyncTrainer):
    """SyncTrainer's epoch and reporting logic with coordinator-scheduled steps and chief-side validation."""

    def _make_data(self, train_data: Any, validation_data: Any) -> None:
        for name in ("class_weight", "validation_steps"):
            if getattr(self.options, name) is not None:
                raise ConfigError(
                    f"{name} is not supported under ParameterServerStrategy (asynchronous steps of one "
                    "worker's batch). Hint: fold class weights into sample weights; validate all the data."
                )

        batch, examples, dataset_fn = self._dataset_fn(train_data)
        steps = self.options.steps_per_epoch or (examples // batch if examples else 0)
        if steps < 1:
            raise ConfigError(
                "the number of steps per epoch is unknown or zero. Hint: pass steps_per_epoch=N."
            )
        self.plan = BatchPlan(batch, batch, steps)
        assert isinstance(self.sync, ParameterServer)  # tfdist.sync picks it for this strategy
        self.ps_sync = self.sync
        self.coordinator = self.sync.coordinator
        self.worker_iterator = iter(self.coordinator.create_per_worker_dataset(dataset_fn))
        self.val_arrays = None
        if validation_data is not None:
            if not isinstance(validation_data, tuple | list):
                raise ConfigError(
                    "under ParameterServerStrategy, validation_data must be NumPy (x, y): the chief "
                    "evaluates it."
                )
            self.val_arrays = check_arrays(validation_data)

    @property
    def replicas(self) -> int:
        """Each scheduled step is one worker's batch: learning-rate scaling counts the strategy's replicas."""
        return int(self.strategy.num_replicas_in_sync)

    @property
    def unknown_length(self) -> bool:
        """Scheduled steps always have a planned length here."""
        return False

    @property
    def has_validation(self) -> bool:
        """True when validation arrays were given."""
        return self.val_arrays is not None

    def _dataset_fn(self, train_data: Any) -> tuple[int, int | None, Any]:
        import tensorflow as tf

        if isinstance(train_data, tuple | list):
            x, y = check_arrays(train_data)
            if self.options.batch_size is None:
                raise ConfigError("NumPy inputs need batch_size= (the batch of one scheduled step).")
            batch, n = self.options.batch_size, len(x)

            def from_arrays() -> Any:
                ds = tf.data.Dataset.from_tensor_slices((x, y, np.ones(n, np.float32)))
                ds = ds.shuffle(min(n, 10_000)).batch(batch, drop_remainder=True)
                return ds.map(weighted()).repeat()

            return batch, n, from_arrays
        if isinstance(train_data, tf.data.Dataset):
            batch = self.options.batch_size or static_batch(train_data)
            full = full_batches(train_data)
            if full == 0:
                raise ConfigError(
                    f"the training dataset holds no full batch of {batch} examples. Hint: lower the batch "
                    "size."
                )
            # The dataset itself, not a function closing over it ("Unable to parse tensor proto" on the
            # workers); each asynchronous step is one worker's full batch (a partial last one is not trained).
            full_only = train_data.map(weighted()).filter(lambda x, y, w, s: tf.shape(w)[0] == batch)
            return batch, full * batch if full > 0 else None, full_only.repeat()
        if callable(train_data):
            if self.options.batch_size is None or self.options.steps_per_epoch is None:
                raise ConfigError(
                    "a dataset_fn needs batch_size= (the batch of one scheduled step) and steps_per_epoch=."
                )
            user_fn, strategy, rows = train_data, self.strategy, self.options.batch_size

            def per_worker() -> Any:
                return strategy.distribute_datasets_from_function(
                    lambda ctx: user_fn(ctx).map(weighted(rows)).repeat()
                )

            return self.options.batch_size, None, per_worker
        raise ConfigError(
            "under ParameterServerStrategy, pass NumPy (x, y) with batch_size, a batched tf.data.Dataset or "
            "a dataset_fn(input_context)."
        )

    def _make_steps(self) -> None:
        import tensorflow as tf

        with self.strategy.scope():
            self.sums = tf.Variable(tf.zeros(self.metrics.width), trainable=False)
        step = replica_train_step(self.model, self.loss_fn, self.metrics, self.sync)
        self.eval_replica = replica_eval_step(self.model, self.loss_fn, self.metrics, self.sync)

        def replica(x: Any, y: Any, w: Any, s: Any) -> None:
            # No stop vote under PS: the chief alone decides when to stop scheduling.
            self.sums.assign_add(step(x, y, w, s, 0.0)[:-1])
            self.step_var.assign_add(1)

        @tf.function
        def worker_step(iterator: Any) -> None:
            x, y, w, s = next(iterator)
            self.strategy.run(replica, args=(x, y, w, s))

        self.worker_step = worker_step

    def _train_steps(self, epoch: int) -> np.ndarray:
        import tensorflow as tf

        done = int(self.step_var.numpy()) - epoch * self.plan.steps_per_epoch
        for scheduled in range(max(0, done), self.plan.steps_per_epoch):
            self.schedule.update(epoch * self.plan.steps_per_epoch + scheduled)
            self.ps_sync.schedule(self.worker_step, args=(self.worker_iterator,))
            self.heartbeat.beat()
            if self.stop.signum:
                break
        self.coordinator.join()
        totals = np.asarray(self.sums.numpy(), dtype=np.float64)
        self.sums.assign(tf.zeros_like(self.sums))
        if self.stop.signum:
            self._preempt(int(self.step_var.numpy()))
        return totals

    def _validate(self) -> dict[str, float]:
        import tensorflow as tf

        assert self.val_arrays is not None
        x, y = self.val_arrays
        totals = np.zeros(self.metrics.width)
        for start in range(0, len(x), self.plan.global_batch):
            xb, yb = x[start : start + self.plan.global_batch], y[start : start + self.plan.global_batch]
            ones = tf.ones(len(xb), tf.float32)
            totals += self.eval_replica(xb, yb, ones, ones / len(xb)).numpy()[:-1]
        return self.metrics.logs(totals, "val_")
