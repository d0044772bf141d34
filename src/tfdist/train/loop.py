"""The synchronous training loop behind ``tfdist.fit``: epochs of one replica step and a Synchroniser."""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import numpy as np

from tfdist import context, resize
from tfdist._log import get_logger
from tfdist.diagnose import peers
from tfdist.errors import CollectiveError, ConfigError, NonFiniteLossError
from tfdist.slurm import commands
from tfdist.sync.step import make_steps
from tfdist.sync.watch import set_step
from tfdist.train.trainer import Trainer

log = get_logger(__name__)


class SyncTrainer(Trainer):
    """One synchronous training run: epochs of steps, then the run files."""

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

    def run(self) -> Any:
        """Train every remaining epoch and return the History (with a ``summary`` dict attached)."""
        self.model.stop_training = False
        started, examples = time.monotonic(), 0
        self.stop.install()
        if self.checkpointer:  # it resumes exactly from a step boundary: a job may grow
            resize.offer("tfdist.fit", self.plan.global_batch, max(1, self.replicas // self.env.world_size))
        try:
            self.callbacks.on_train_begin()
            # The epoch counter, not step // steps: a checkpoint at an epoch's last step resumes with its end.
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
            resize.withdraw()
            set_step(None)
        return self._finish(time.monotonic() - started, examples)

    def _barrier(self) -> None:
        """No worker returns before every worker finished its last save (the chief's files exist then)."""
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
                out = self.train_step(batch, self._votes[self.stop.requested])
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
            if self.sync.at_sync_point():  # e.g. the MPI backend's auto buckets turned on
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
        """Whether a batch hook set ``model.stop_training`` on any worker: all of them stop at this step."""
        if not self.every_step:
            return False
        stop = self.sync.agree(bool(self.model.stop_training))
        self.model.stop_training = stop
        return stop

    def _check_finite(self, values: np.ndarray, block: list[Any], step: int, epoch: int) -> None:
        """Stop every worker at one sync point when the loss is no longer finite (no checkpoint after)."""
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
        """Steps at which every worker reads its results (every ``log_every``: a read blocks the host until
        the step ran, so it could not queue the next one meanwhile)."""
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
        if not self.stop.signum and self.checkpointer and resize.requested():
            self._resize(step)
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

    def _resize(self, step: int) -> None:
        """Nodes wait to join: save at this step, then exit with :data:`tfdist.resize.EXIT_CODE`."""
        assert self.checkpointer is not None
        self.checkpointer.save(step)
        self.reporter.message(f"the job grows: checkpoint written at step {step}; it resumes there.")
        self._barrier()
        raise SystemExit(resize.EXIT_CODE)

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
