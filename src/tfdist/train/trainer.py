"""One ``tfdist.fit`` run's state, set up once and agreed by every worker: the strategy and its
synchroniser, the data, the learning-rate schedule, a sharded optimizer, checkpoints and callbacks."""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from tfdist import context
from tfdist._log import get_logger
from tfdist.diagnose.slowness import SlowWatch
from tfdist.errors import ConfigError
from tfdist.sync import synchroniser
from tfdist.sync.shard import open_shard
from tfdist.sync.step import loss_function
from tfdist.train.agreement import Schedule, agree, check_resumed, setup_row
from tfdist.train.batches import BatchPlan
from tfdist.train.callbacks import chief_filtered, needs_every_step, overrides
from tfdist.train.data import DistributedData
from tfdist.train.hooks import Heartbeat, LearningRate, StopRequest
from tfdist.train.metrics import MetricSet
from tfdist.train.options import FitOptions
from tfdist.train.report import Reporter
from tfdist.train.scaling import scaled_lr
from tfdist.train.timeline import open_timeline

log = get_logger(__name__)


def strategy_of(model: Any) -> Any:
    """The strategy the model's variables belong to; ConfigError when built outside the user's strategy."""
    import tensorflow as tf

    variables = model.trainable_variables
    if not variables:
        raise ConfigError(
            "the model has no trainable variables (not built?). Hint: give the first layer an Input shape."
        )
    variable = variables[0]
    inner = getattr(variable, "value", variable)  # Keras 3 wraps TensorFlow's variable; .value is it
    if callable(inner):  # tf.keras (Keras 2): the variable is TensorFlow's own (.value is a method)
        inner = variable
    owner = getattr(inner, "_distribute_strategy", None)
    if owner is None:
        if context.built() is not None:
            raise ConfigError(
                "the model was built outside the strategy scope. Hint: build and compile it inside `with "
                "strategy.scope():`."
            )
        return tf.distribute.get_strategy()
    return owner


def ensure_built(model: Any, x_sample: Any) -> None:
    """Build a model that has no variables yet from a sample batch, inside the strategy it was made under."""
    if model.variables:
        return
    import tensorflow as tf

    owner = getattr(model, "_distribute_strategy", None) or tf.distribute.get_strategy()
    with owner.scope():
        model(x_sample, training=False)


def is_parameter_server(strategy: Any) -> bool:
    """True for TensorFlow's (V2) ParameterServerStrategy."""
    import tensorflow as tf

    return isinstance(strategy, tf.distribute.experimental.ParameterServerStrategy)


class Trainer:
    """A run's state, set up once; :class:`tfdist.train.loop.SyncTrainer` runs its epochs."""

    def __init__(
        self,
        model: Any,
        train_data: Any,
        validation_data: Any,
        callbacks: Sequence[Any],
        options: FitOptions,
        sample: tuple[Any, Any],
    ) -> None:
        """``sample``: a tiny ``(x, y)`` batch of ``train_data`` (:func:`sample_inputs`)."""
        import tensorflow as tf

        self.model, self.options = model, options
        self.strategy = strategy_of(model)
        self.env = context.current().environment  # decided once by tfdist.strategy()
        self.loss_fn, _ = loss_function(model)
        self.metrics = MetricSet(model, self.strategy, *sample)
        self.sync = synchroniser(self.strategy)
        self.trace = open_timeline(options.timeline, self.env.rank)  # a no-op unless asked for
        self.sync = self.trace.wrap(self.sync, markers=not options.jit_compile)
        self.class_weights = self._class_weights(train_data)
        self.plan: BatchPlan  # the training data's, set by _make_data (and once more by _learnt)
        self._make_data(train_data, validation_data)
        optimizer = model.optimizer
        base_lr = float(np.asarray(optimizer.learning_rate))
        self.target_lr = scaled_lr(base_lr, self.replicas, options.lr_scaling)
        self.schedule = LearningRate(
            optimizer, base_lr, self.target_lr, round(options.warmup_epochs * self.plan.steps_per_epoch)
        )
        with self.strategy.scope():
            only_first = tf.VariableAggregation.ONLY_FIRST_REPLICA
            self.step_var = tf.Variable(0, dtype=tf.int64, trainable=False, aggregation=only_first)
            self.epoch_var = tf.Variable(0, dtype=tf.int64, trainable=False, aggregation=only_first)
            # The running sums of the epoch so far, checkpointed: a resumed epoch reports all its steps.
            self.epoch_sums = tf.Variable(
                tf.zeros(self.metrics.width, tf.float64), trainable=False, aggregation=only_first
            )
            # Sharded (tfdist.sync.shard): the optimizer is built over this rank's flat shard only.
            self.shard = open_shard(model, self.strategy, options)
            optimizer.build(self.shard.variables if self.shard else model.trainable_variables)
        self.agreed = self._agree(callbacks)
        self._check_unknown_length()
        with self.strategy.scope():
            # Own data of unknown length: the first epoch's length, checkpointed (0 until it is known).
            self.epoch_steps = tf.Variable(0, dtype=tf.int64, trainable=False, aggregation=only_first)
        self.restored = False
        self.checkpointer = self._restore()
        if self.unknown_length and int(self.epoch_steps.numpy()):  # resumed after the first epoch
            self.data.learn(int(self.epoch_steps.numpy()))
            self.plan = self.data.plan
        self._start_at(options.initial_epoch)
        self._start_in_sync()
        self._make_steps()
        from keras.callbacks import CallbackList, History

        self.history = History()
        # Decided from every worker's whole list: every worker reads results at the same steps.
        self.every_step, self._test_hooks = self.agreed.every_step, self.agreed.test_hooks
        self.callbacks = CallbackList(
            [self.history, *chief_filtered(callbacks, self.env.is_chief)],
            model=model,
            epochs=options.epochs,
            steps=self.plan.steps_per_epoch or None,  # None (as in Keras): not known yet
            verbose=0,
        )
        self.reporter = Reporter(
            is_chief=self.env.is_chief,
            verbose=options.verbose,
            epochs=options.epochs,
            steps_per_epoch=self.plan.steps_per_epoch or None,
            run_dir=options.run_dir,
            tensorboard_dir=options.tensorboard_dir,
        )
        self.stop, self.heartbeat = StopRequest(), Heartbeat()
        own = self.env.cluster_spec.get(self.env.role, [])
        own_address = own[self.env.task_index] if 0 <= self.env.task_index < len(own) else None
        self.slow = SlowWatch(self.env.cluster_spec, own_address)  # one line when a link slows the steps
        self.iterator: Any = None  # one input iterator for the whole run, made at the first epoch
        # (global step, wall time) at every sync point, and the first step's end: for `tfdist bench`.
        self.timeline: list[tuple[int, float]] = []
        self.first_step_at: float | None = None
        self._votes = {False: tf.constant(0.0), True: tf.constant(1.0)}  # no new tensor per step
        self.last_finite: tuple[float, int] | None = None  # (loss per example, global step) at a sync point
        self.resumed_examples = 0.0  # examples of the current epoch trained before a resume

    @property
    def processes(self) -> tuple[int, int]:
        """(index, count) of the processes that split each global batch beyond the strategy itself."""
        return self.sync.processes

    def _make_data(self, train_data: Any, validation_data: Any) -> None:
        o = self.options
        make = functools.partial(
            DistributedData,
            self.strategy,
            seed=o.seed,
            processes=self.processes,
            table=self.sync.table,
            per_worker=o.per_worker_data,
        )
        self.data = make(
            train_data,
            batch_size=o.batch_size,
            steps_per_epoch=o.steps_per_epoch,
            shuffle=o.shuffle,
            class_weights=self.class_weights,
        )
        self.plan = self.data.plan
        self.val = None
        if validation_data is not None:
            # A dataset is batched by its own pipeline (as in Keras); arrays by the given size.
            arrays = isinstance(validation_data, tuple | list)
            size = (o.validation_batch_size or self.plan.global_batch) if arrays else o.validation_batch_size
            self.val = make(validation_data, batch_size=size, steps_per_epoch=None, shuffle=False)
        # Keras evaluates the first validation_steps batches at every validation (None: all of them).
        known = self.val.plan.steps_per_epoch if self.val else 0
        self.val_steps: int | None = min(known, o.validation_steps or known) if known else o.validation_steps

    @property
    def has_validation(self) -> bool:
        """True when validation data was given."""
        return self.val is not None

    @property
    def unknown_length(self) -> bool:
        """Whether an epoch's length is not known yet (own data, :mod:`tfdist.train.uneven`)."""
        return self.data.dynamic

    @property
    def replicas(self) -> int:
        """Replicas that share each global batch (all processes' strategies together)."""
        return int(self.data.replicas)

    def _make_steps(self) -> None:
        """The compiled steps (the loop's own)."""
        raise NotImplementedError

    def _agree(self, callbacks: Sequence[Any]) -> Schedule:
        """One schedule from every worker's callbacks and options; the chief's checkpoint settings win."""
        o = self.options
        row = setup_row(
            any(needs_every_step(cb) for cb in callbacks),
            any(overrides(cb, ("on_test_batch_end",)) for cb in callbacks),
            (o.epochs, self.plan.global_batch, self.plan.steps_per_epoch, o.log_every, o.initial_epoch),
            os.path.abspath(o.checkpoint_dir) if o.checkpoint_dir else None,
            o.checkpoint_every,
        )
        agreed = agree(self.sync.table(row))
        self.options = dataclasses.replace(
            o, checkpoint_dir=agreed.checkpoint_dir, checkpoint_every=agreed.checkpoint_every
        )
        return agreed

    def _check_unknown_length(self) -> None:
        """Settings counted in epochs need an epoch's length, which own data tell only after the first."""
        if not self.unknown_length:
            return
        o = self.options
        for name, value in (("warmup_epochs", o.warmup_epochs), ("initial_epoch", o.initial_epoch)):
            if value:
                raise ConfigError(
                    f"{name}={value} needs the length of an epoch, but a worker's own dataset does not know "
                    "its length. Hint: pass steps_per_epoch=N, or declare the length with "
                    "dataset.apply(tf.data.experimental.assert_cardinality(N))."
                )

    def _restore(self) -> Any:
        if not self.options.checkpoint_dir:
            return None
        from tfdist.train.checkpoint import Checkpointer

        checkpointer = Checkpointer(
            self.options.checkpoint_dir,
            model=self.model,
            optimizer=self.model.optimizer,
            step=self.step_var,
            epoch=self.epoch_var,
            is_chief=self.env.is_chief,
            keep=self.options.keep_checkpoints,
            extra={"epoch_sums": self.epoch_sums}
            | ({"epoch_steps": self.epoch_steps} if self.unknown_length else {}),
            shard=self.shard,
        )
        restored = checkpointer.restore_latest()
        resumed = np.array([float(bool(restored)), float(self.step_var.numpy())])
        check_resumed(self.sync.table(resumed), self.options.checkpoint_dir)
        if restored:
            self.restored = True
            log.info("resumed from %s at step %d", restored, int(self.step_var.numpy()))
        return checkpointer

    def _start_at(self, initial_epoch: int) -> None:
        """``initial_epoch`` (Keras' meaning): a new run starts its epoch count and its data there."""
        if initial_epoch and not self.restored:
            self.epoch_var.assign(initial_epoch)
            self.step_var.assign(initial_epoch * self.plan.steps_per_epoch)

    def _start_in_sync(self) -> None:
        """Process-level ranks build their models apart: a new run starts all of them from rank 0's."""
        if not self.restored:
            self.sync.broadcast_weights(self.model)

    def _class_weights(self, train_data: Any) -> np.ndarray | None:
        """Keras' ``class_weight`` as a checked table (labels in memory are checked against it)."""
        if self.options.class_weight is None:
            return None
        from tfdist.train.weights import class_weight_table, output_classes

        labels = np.asarray(train_data[1]) if isinstance(train_data, tuple | list) else None
        return class_weight_table(self.options.class_weight, output_classes(self.model), labels)
