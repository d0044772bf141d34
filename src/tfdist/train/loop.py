"""The synchronous training loop behind ``tfdist.fit``: epochs of one replica step plus a Synchroniser.

Keras 3's own ``model.fit`` fails under MultiWorkerMirroredStrategy and ParameterServerStrategy on
TensorFlow 2.21; this loop runs ``strategy.run`` itself with global-batch loss averaging
(:mod:`tfdist.sync.step`), whatever the backend.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from tfdist import context
from tfdist._log import get_logger
from tfdist.diagnose import peers
from tfdist.diagnose.slowness import SlowWatch
from tfdist.errors import CollectiveError, ConfigError, NonFiniteLossError
from tfdist.slurm import commands
from tfdist.sync import synchroniser
from tfdist.sync.shard import open_shard
from tfdist.sync.step import loss_function, make_steps
from tfdist.sync.watch import set_step
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


class SyncTrainer:
    """One synchronous training run: set up once, then epochs of steps, then the run files."""

    def __init__(
        self,
        model: Any,
        train_data: Any,
        validation_data: Any,
        callbacks: Sequence[Any],
        options: FitOptions,
        sample: tuple[Any, Any],
    ) -> None:
        """``sample``: a tiny ``(x, y)`` batch of ``train_data`` (:func:`sample_inputs`), read once by
        ``fit``."""
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
        # Decided from every worker's whole list (before the chief-only callbacks leave the other workers):
        # every worker must read results at the same steps, whatever callbacks it was given.
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
        # (global step, wall time) at every sync point, and when the run's first step finished: what
        # `tfdist bench` reads step times and time-to-first-step from.
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
        self.data = DistributedData(
            self.strategy,
            train_data,
            batch_size=o.batch_size,
            steps_per_epoch=o.steps_per_epoch,
            shuffle=o.shuffle,
            seed=o.seed,
            processes=self.processes,
            class_weights=self.class_weights,
            table=self.sync.table,
            per_worker=o.per_worker_data,
        )
        self.plan = self.data.plan
        self.val = None
        if validation_data is not None:
            self.val = DistributedData(
                self.strategy,
                validation_data,
                # A dataset is batched by its own pipeline (as in Keras); arrays by the given size.
                batch_size=(o.validation_batch_size or self.plan.global_batch)
                if isinstance(validation_data, tuple | list)
                else o.validation_batch_size,
                steps_per_epoch=None,
                shuffle=False,
                seed=o.seed,
                processes=self.processes,
                table=self.sync.table,
                per_worker=o.per_worker_data,
            )
        # Keras evaluates the first validation_steps batches at every validation (None: all of them, also
        # when own data of unknown length tell their end only by running out).
        known = self.val.plan.steps_per_epoch if self.val else 0
        self.val_steps: int | None = min(known, o.validation_steps or known) if known else o.validation_steps

    @property
    def has_validation(self) -> bool:
        """True when validation data was given."""
        return self.val is not None

    @property
    def unknown_length(self) -> bool:
        """Whether an epoch's length is not known yet: each worker's own data of unknown length, told by
        the first epoch (:mod:`tfdist.train.uneven`)."""
        return self.data.dynamic

    @property
    def replicas(self) -> int:
        """Replicas that share each global batch (all processes' strategies together)."""
        return int(self.data.replicas)

    def _make_steps(self) -> None:
        self.train_step, self.eval_step = make_steps(
            self.strategy,
            self.model,
            self.loss_fn,
            self.metrics,
            self.step_var,
            self.sync,
            self.options.jit_compile,
            own_data=self.data.own is not None,
            shard=self.shard,
        )
        self.reduce_totals = self.sync.reduce_totals

    def _agree(self, callbacks: Sequence[Any]) -> Schedule:
        """One schedule from every worker's callbacks and options (:mod:`tfdist.train.agreement`); the
        chief's checkpoint directory and frequency become this worker's."""
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
        """Settings counted in epochs need an epoch's length: own data of unknown length tell it only at the
        end of the first epoch."""
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

    def run(self) -> Any:
        """Train every remaining epoch and return the History (with a ``summary`` dict attached)."""
        self.model.stop_training = False
        started, examples = time.monotonic(), 0
        self.stop.install()
        try:
            self.callbacks.on_train_begin()
            # The epoch counter, not step // steps: a checkpoint taken at an epoch's last step before its
            # end (validation, history, callbacks) resumes with that end, after zero more steps.
            first_epoch = int(self.epoch_var.numpy())
            if self.restored and first_epoch:  # a resumed run returns the whole run's history
                self.history.history = self.checkpointer.history(first_epoch)
                self.history.epoch = list(range(first_epoch))
            if first_epoch >= self.options.epochs:
                self.reporter.message(f"the checkpoint is already at epoch {first_epoch}; nothing to train.")
            for epoch in range(first_epoch, self.options.epochs):
                examples += self._epoch(epoch)
                # A callback on one worker only (EarlyStopping on the chief) stops every worker here.
                self.model.stop_training = self.sync.agree(bool(self.model.stop_training))
                if self.model.stop_training:
                    self.reporter.message(
                        f"stopped early after epoch {epoch + 1} (a callback set model.stop_training)."
                    )
                    break
            self.callbacks.on_train_end()
            self._barrier()
        except Exception as exc:
            step = int(self.step_var.numpy()) + 1  # the step that did not finish
            plan = context.current().plan
            timeout = plan.collective_timeout if plan is not None else None
            world = self.env.world_size
            line = peers.collective_error(
                exc, step, self.env.rank, timeout, lambda: peers.roll_call(self.env.rank, world, step)
            )
            if line is not None:
                raise CollectiveError(line) from None
            if peers.is_peer_failure(exc):
                latest, at = self.checkpointer.latest() if self.checkpointer else (None, None)
                peers.report(exc, int(self.step_var.numpy()), self.env.cluster_spec, latest, at)
            raise
        finally:
            self.stop.restore()
            set_step(None)
        return self._finish(time.monotonic() - started, examples)

    def _barrier(self) -> None:
        """No worker returns before every worker, the chief included, finished its last save: a script
        that reads the chief's checkpoint or files right after ``fit`` finds them on every worker."""
        self.sync.barrier()

    def _epoch(self, epoch: int) -> int:
        self.callbacks.on_epoch_begin(epoch)
        self.reporter.epoch_start(epoch)
        started = time.monotonic()
        totals = self._train_steps(epoch)
        seconds = time.monotonic() - started  # training only: checkpoint and validation time excluded
        self.epoch_var.assign(epoch + 1)
        self.epoch_sums.assign(np.zeros(self.metrics.width))  # a checkpoint here starts the next epoch
        logs = self.metrics.logs(totals)
        if self.has_validation and self.options.validates_after(epoch):
            logs.update(self._validate())
        trained = totals[-1] - self.resumed_examples  # this run's examples (not the resumed epoch's)
        logs["examples_per_sec"] = float(trained / max(seconds, 1e-9))
        if self.checkpointer:  # after validation: the epoch's whole history goes with its checkpoint
            history = {k: [*self.history.history.get(k, []), v] for k, v in logs.items()}
            self.checkpointer.save(int(self.step_var.numpy()), history=history)
        self.reporter.epoch_end(epoch, logs, seconds)
        self.callbacks.on_epoch_end(epoch, logs)
        return int(trained)

    def _train_steps(self, epoch: int) -> np.ndarray:
        step = int(self.step_var.numpy())
        skip = step - epoch * self.plan.steps_per_epoch
        # A resumed epoch continues its sums from the checkpoint: its reported loss covers every step.
        totals = np.array(self.epoch_sums.numpy()) if skip > 0 else np.zeros(self.metrics.width)
        self.resumed_examples = float(totals[-1])
        started = time.monotonic()
        learning = self.unknown_length  # this epoch tells every epoch's length
        if learning:
            iterator = self.data.epoch(epoch, skip)  # endless padding after the data: one epoch only
        else:
            if self.iterator is None:
                self.iterator = self.data.iterate(epoch, self.options.epochs, skip)
            iterator = self.iterator
        batches = self.data.stream(iterator, self.sync.agree, skip)
        block: list[Any] = []  # this worker's step sums since the last sync point (reduced there)
        done, last = skip, False
        while not last:
            with self.trace.span("input"):
                batch, last = next(batches, (None, True))
            if batch is None:
                break
            self.schedule.update(step)  # first: a callback's own per-step rate comes after, and stays
            if not block:  # as Keras with steps_per_execution: begin at a block's first step
                self.callbacks.on_train_batch_begin(done)
            set_step(step + 1)  # the MPI backend's timeout line names the step being run
            with self.trace.span("step"):
                out = self.train_step(batch, self._votes[bool(self.stop.signum)])
            block.append(out)
            step += 1
            done += 1
            if self.first_step_at is None:
                out.numpy()  # one host sync per run: when did the first step finish?
                self.first_step_at = time.time()
            if not (last or self._sync_point(step, done)):
                continue
            # Reading results blocks until the step ran; doing it every few steps keeps the input
            # pipeline and the next step's dispatch overlapping with compute.
            with self.trace.span("read results"):
                values = self.reduce_totals(_sum(block)).numpy()
            self._check_finite(values, block, step, epoch)
            block = []
            # auto gradient buckets (the MPI backend across nodes): decided at a sync point, the same
            # step on every rank, from the steps measured so far; the step is traced again when they pay.
            mpi: Any = self.sync  # only the MPI backend's has them (not in the Synchroniser protocol)
            if getattr(mpi, "buckets_pending", False) and mpi.decide_buckets():
                self._make_steps()
            self.timeline.append((step, time.time()))
            self.slow.observe(step, time.monotonic())
            totals += values[:-1]
            self.epoch_sums.assign(totals)
            self.heartbeat.beat()
            rate = (totals[-1] - self.resumed_examples) / max(time.monotonic() - started, 1e-9)
            self.reporter.step(done, totals[0] / max(totals[-1], 1), rate)
            if self._checkpoint_due(step):
                self.checkpointer.save(step)
            if values[-1] > 0:  # someone voted to stop: every worker sees the same sum and stops here
                self._preempt(step)
            # The epoch's running logs, the same on every worker, as Keras passes them.
            self.callbacks.on_train_batch_end(done - 1, self.metrics.logs(totals))
            if self._batch_stop():
                break
        if block:
            values = self.reduce_totals(_sum(block)).numpy()
            self._check_finite(values, block, step, epoch)
            totals += values[:-1]
        if learning and last:
            self._learnt(done)
        return totals

    def _learnt(self, steps: int) -> None:
        """Every later epoch has the first one's ``steps`` (own data of unknown length), checkpointed."""
        if steps == 0:
            raise ConfigError("every worker's own dataset is empty: there is nothing to train on.")
        self.data.learn(steps)
        self.plan = self.data.plan
        self.epoch_steps.assign(steps)
        self.reporter.steps = steps
        self.callbacks.params["steps"] = steps

    def _batch_stop(self) -> bool:
        """Whether a batch hook set ``model.stop_training``, agreed by every worker: one worker's callback
        (a timer, a file it watched) stops all of them at this same step, or none."""
        if not self.every_step:
            return False
        stop = self.sync.agree(bool(self.model.stop_training))
        self.model.stop_training = stop
        return stop

    def _check_finite(self, values: np.ndarray, block: list[Any], step: int, epoch: int) -> None:
        """Stop every worker at the same sync point when the job's loss is no longer finite.

        Every worker reads the same reduced sums, so all of them stop here; no checkpoint is written
        after the non-finite steps (the last one saved holds finite weights).
        """
        count = values[-2]
        if np.isfinite(values[0]):
            if count > 0:
                self.last_finite = (float(values[0] / count), step)
            return
        if self.options.on_nan != "stop":
            return
        first = step - len(block) + 1
        local = [i for i, out in enumerate(block) if not np.isfinite(np.asarray(out)[0])]
        where = f"at step {first + local[0]}" if local else f"in steps {first}-{step}"
        in_epoch = (first + (local[0] if local else 0)) - epoch * self.plan.steps_per_epoch
        before = (
            f"last finite loss {self.last_finite[0]:.6g} (at step {self.last_finite[1]})"
            if self.last_finite
            else "no finite loss before it"
        )
        what = "NaN" if np.isnan(values[0]) else "infinite"
        raise NonFiniteLossError(
            f"the loss became {what} {where} (epoch {epoch + 1}, step {in_epoch} of "
            f"{self.plan.steps_per_epoch}); {before}; training stopped on every worker, no "
            "checkpoint written after it. Hint: lower the learning rate, check the data for NaN/inf, or pass "
            "on_nan='continue'."
        )

    def _sync_point(self, step: int, done: int) -> bool:
        """Steps at which every worker reads its results: the same step numbers everywhere.

        Results (loss sums, stop votes) are read every ``log_every`` steps, not every step: reading blocks
        the host until the step ran, which would stop it from queueing the next one meanwhile.
        """
        every = 1 if self.every_step else self.options.log_every
        return done == self.plan.steps_per_epoch or step % every == 0 or self._checkpoint_due(step)

    def _checkpoint_due(self, step: int) -> bool:
        every = self.options.checkpoint_every
        return bool(self.checkpointer and every and step % every == 0)

    def _validate(self) -> dict[str, float]:
        """The validation logs, with the test hooks Keras calls during ``fit``'s validation."""
        assert self.val is not None
        local: Any = None
        test_hooks = self.every_step or self._test_hooks
        self.callbacks.on_test_begin()
        batches = self.val.stream(self.val.epoch(0), self.sync.agree)
        batch = -1
        for index, (data_batch, _) in enumerate(batches):
            if index == self.val_steps:  # Keras' validation_steps
                break
            batch = index
            self.callbacks.on_test_batch_begin(batch)
            out = self.eval_step(data_batch)
            local = out if local is None else local + out
            if test_hooks:  # a read per batch only for a callback that looks at it
                running = self.reduce_totals(local).numpy()[:-1]
                self.callbacks.on_test_batch_end(batch, self.metrics.logs(running))
        totals = self.reduce_totals(local).numpy()[:-1] if local is not None else np.zeros(self.metrics.width)
        logs = self.metrics.logs(totals)
        if not test_hooks:
            self.callbacks.on_test_batch_end(batch, logs)
        self.callbacks.on_test_end(logs)
        return {f"val_{k}": v for k, v in logs.items()}

    def _preempt(self, step: int) -> None:
        signum = self.stop.signum or signal.SIGTERM
        if self.checkpointer:
            self.checkpointer.save(step)
        # A warning on every worker (not a chief-only progress line): it explains each log's exit code.
        saved = "checkpoint written" if self.checkpointer else "no checkpoint_dir, nothing saved"
        log.warning("stop requested (%s): %s at step %d; exiting.", signal.Signals(signum).name, saved, step)
        # Nobody exits before everybody saved and said so: under `srun --kill-on-bad-exit` the first
        # non-zero exit ends the other tasks, and the requeue below ends the job.
        self._barrier()
        # A Slurm job, whether this task reads Slurm's variables or the TF_CONFIG `tfdist run` derived.
        if self.env.is_chief and self.checkpointer and os.environ.get("SLURM_JOB_ID"):
            commands.requeue_slurm_job("the next run resumes from the checkpoint")
        raise SystemExit(128 + signum)

    def _finish(self, duration: float, examples: int) -> Any:
        self.history.summary = {
            "steps": int(self.step_var.numpy()),
            "duration_s": duration,
            "examples": examples,
            "examples_per_sec": examples / max(duration, 1e-9),
            "global_batch": self.plan.global_batch,
            "replicas": self.strategy.num_replicas_in_sync * self.processes[1],
            "backend": self.sync.name,
            "world_size": self.env.world_size,
            "strategy": type(self.strategy).__name__,
            "learning_rate": self.target_lr,
            "first_step_at": self.first_step_at,
            "timeline": self.timeline,
        }
        self.trace.write()
        self.reporter.finish(
            self.history.history, {"summary": self.history.summary, "environment": self.env.describe()}
        )
        return self.history


def _sum(outputs: list[Any]) -> Any:
    """The element-wise sum of a block's step outputs (one op, not one per step)."""
    if len(outputs) == 1:
        return outputs[0]
    import tensorflow as tf

    return tf.add_n(outputs)
