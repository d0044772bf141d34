"""``tfdist.fit``: synchronous data-parallel training with Keras ergonomics under any local or
multi-worker strategy (Keras 3's own ``model.fit`` fails under MultiWorkerMirroredStrategy)."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

import numpy as np

from tfdist._log import get_logger
from tfdist.errors import ConfigError
from tfdist.train.data import DistributedData
from tfdist.train.metrics import per_example_stat, resolve_metrics
from tfdist.train.report import Reporter
from tfdist.train.scaling import lr_at, scaled_lr
from tfdist.train.steps import loss_function, make_steps

log = get_logger(__name__)
#: Callbacks that write files: run on the chief only, or two workers would write the same file.
CHIEF_ONLY_CALLBACKS = ("CSVLogger", "TensorBoard", "ModelCheckpoint")
UNSUPPORTED_CALLBACKS = {"BackupAndRestore": "use tfdist.fit(checkpoint_dir=...) for step-exact resume"}


@dataclass
class _StopRequest:
    """Set by SIGTERM / SIGUSR2; honoured at the next step boundary on every worker."""

    signum: int = 0
    old: dict[int, Any] = field(default_factory=dict)

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        self.signum = signum

    def install(self) -> None:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGUSR2):
                self.old[sig] = signal.signal(sig, self)

    def restore(self) -> None:
        for sig, old in self.old.items():
            signal.signal(sig, old)


class _Heartbeat:
    """Touches TFDIST_HEARTBEAT_FILE at most once a second so the launcher's watchdog sees progress."""

    def __init__(self) -> None:
        self.path = os.environ.get("TFDIST_HEARTBEAT_FILE")
        self.last = 0.0

    def beat(self) -> None:
        now = time.monotonic()
        if self.path and now - self.last >= 1.0:
            self.last = now
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            with open(self.path, "a"):
                os.utime(self.path)


def strategy_of(model: Any) -> Any:
    """The strategy the model's variables belong to; ConfigError when built outside the user's strategy."""
    import tensorflow as tf

    from tfdist import api

    variables = model.trainable_variables
    if not variables:
        raise ConfigError(
            "the model has no trainable variables (not built?). Hint: give the first layer an Input shape."
        )
    owner = getattr(getattr(variables[0], "value", variables[0]), "_distribute_strategy", None)
    if owner is None:
        if api.last_strategy() is not None:
            raise ConfigError(
                "the model was built outside the strategy scope. Hint: build and compile it inside `with strategy.scope():`."
            )
        return tf.distribute.get_strategy()
    return owner


def _split_callbacks(callbacks: Sequence[Any], is_chief: bool) -> list[Any]:
    kept = []
    for cb in callbacks:
        name = type(cb).__name__
        if name in UNSUPPORTED_CALLBACKS:
            raise ConfigError(
                f"callback {name} is not supported by tfdist.fit: {UNSUPPORTED_CALLBACKS[name]}."
            )
        if name in CHIEF_ONLY_CALLBACKS and not is_chief:
            continue
        kept.append(cb)
    return kept


def fit(
    model: Any,
    train_data: Any,
    *,
    epochs: int,
    batch_size: int | None = None,
    steps_per_epoch: int | None = None,
    validation_data: Any = None,
    validation_batch_size: int | None = None,
    callbacks: Sequence[Any] = (),
    verbose: int = 1,
    checkpoint_dir: str | None = None,
    checkpoint_every: int | None = None,
    keep_checkpoints: int = 3,
    lr_scaling: str = "none",
    warmup_epochs: float = 0.0,
    shuffle: bool = True,
    seed: int = 0,
    run_dir: str | None = None,
    tensorboard_dir: str | None = None,
    jit_compile: bool = False,
) -> Any:
    """Train ``model`` (built and compiled in the strategy's scope) and return a Keras ``History``.

    ``train_data``: a tf.data.Dataset batched by the GLOBAL batch, a ``dataset_fn(input_context)``
    returning per-replica batches (with ``steps_per_epoch`` and ``batch_size``), or NumPy ``(x, y)`` with
    ``batch_size`` (global). Losses are averaged over the global batch; metrics are summed over every
    replica and worker, so all workers return the same history. With ``checkpoint_dir`` the run saves
    every ``checkpoint_every`` steps and at each epoch end, and resumes from the newest checkpoint.
    SIGTERM/SIGUSR2 checkpoint at the next step boundary on all workers and then raise SystemExit(128+signal).
    """
    import tensorflow as tf

    from tfdist.env import detect_environment

    if not isinstance(epochs, int) or epochs <= 0:
        raise ConfigError(f"epochs={epochs!r} must be a positive integer.")
    if checkpoint_every is not None and checkpoint_every < 1:
        raise ConfigError(f"checkpoint_every={checkpoint_every} must be at least 1 step.")
    strategy = strategy_of(model)
    env = detect_environment()
    loss_fn, loss_name = loss_function(model)
    metric_names = resolve_metrics(
        model._compile_config.config.get("metrics") if getattr(model, "_compile_config", None) else None,
        loss_name,
    )
    data = DistributedData(
        strategy,
        train_data,
        batch_size=batch_size,
        steps_per_epoch=steps_per_epoch,
        shuffle=shuffle,
        seed=seed,
    )
    plan = data.plan
    val = None
    if validation_data is not None:
        val = DistributedData(
            strategy,
            validation_data,
            batch_size=validation_batch_size or plan.global_batch,
            steps_per_epoch=None,
            shuffle=False,
            seed=seed,
            pad=True,
        )
    optimizer = model.optimizer
    base_lr = float(np.asarray(optimizer.learning_rate))
    target_lr = scaled_lr(base_lr, strategy.num_replicas_in_sync, lr_scaling)
    warmup_steps = round(warmup_epochs * plan.steps_per_epoch)
    with strategy.scope():
        step_var = tf.Variable(
            0, dtype=tf.int64, trainable=False, aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA
        )
        epoch_var = tf.Variable(
            0, dtype=tf.int64, trainable=False, aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA
        )
        optimizer.build(model.trainable_variables)
    checkpointer = None
    if checkpoint_dir:
        from tfdist.train.checkpoint import Checkpointer

        checkpointer = Checkpointer(
            checkpoint_dir,
            model=model,
            optimizer=optimizer,
            step=step_var,
            epoch=epoch_var,
            is_chief=env.is_chief,
            keep=keep_checkpoints,
        )
        restored = checkpointer.restore_latest()
        if restored:
            log.info("resumed from %s at step %d", restored, int(step_var.numpy()))
    train_step, eval_step = make_steps(
        strategy,
        model,
        loss_fn,
        [per_example_stat(s) for _, s in metric_names],
        plan.global_batch,
        step_var,
        jit_compile,
    )
    from keras.callbacks import CallbackList, History

    history = History()
    cbs = CallbackList(
        [history, *_split_callbacks(callbacks, env.is_chief)],
        model=model,
        epochs=epochs,
        steps=plan.steps_per_epoch,
        verbose=0,
    )
    reporter = Reporter(
        is_chief=env.is_chief,
        verbose=verbose,
        epochs=epochs,
        steps_per_epoch=plan.steps_per_epoch,
        run_dir=run_dir,
        tensorboard_dir=tensorboard_dir,
    )
    schedule = _LearningRate(optimizer, base_lr, target_lr, warmup_steps)
    stop = _StopRequest()
    stop.install()
    heartbeat = _Heartbeat()
    names = ["loss", *[n for n, _ in metric_names]]
    model.stop_training = False
    started = time.monotonic()
    trained_examples = 0
    try:
        cbs.on_train_begin()
        global_step = int(step_var.numpy())
        first_epoch = global_step // plan.steps_per_epoch
        if first_epoch >= epochs:
            reporter.message(
                f"checkpoint is already at step {global_step} (epoch {first_epoch}); nothing to train."
            )
        for epoch in range(first_epoch, epochs):
            skip = global_step - epoch * plan.steps_per_epoch
            cbs.on_epoch_begin(epoch)
            reporter.epoch_start(epoch)
            epoch_started = time.monotonic()
            totals = np.zeros(len(names) + 1)
            iterator = data.epoch(epoch, skip)
            for done in range(skip, plan.steps_per_epoch):
                schedule.update(global_step)
                try:
                    batch = next(iterator)
                except StopIteration:
                    break
                out = train_step(batch, tf.constant(1.0 if stop.signum else 0.0)).numpy()
                global_step += 1
                totals += out[:-1]
                heartbeat.beat()
                elapsed = time.monotonic() - epoch_started
                reporter.step(done + 1, totals[0] / max(totals[-1], 1), totals[-1] / max(elapsed, 1e-9))
                if checkpointer and checkpoint_every and global_step % checkpoint_every == 0:
                    checkpointer.save(global_step)
                if out[-1] > 0:
                    _preempt(checkpointer, global_step, stop.signum or signal.SIGTERM)
            trained_examples += int(totals[-1])
            epoch_var.assign(epoch + 1)
            if checkpointer:
                checkpointer.save(global_step)
            seconds = time.monotonic() - epoch_started
            logs = {name: float(totals[i] / max(totals[-1], 1)) for i, name in enumerate(names)}
            if val is not None:
                logs.update(_evaluate(val, eval_step, names))
            logs["examples_per_sec"] = float(totals[-1] / max(seconds, 1e-9))
            reporter.epoch_end(epoch, logs, seconds)
            cbs.on_epoch_end(epoch, logs)
            if model.stop_training:
                reporter.message(
                    f"stopped early after epoch {epoch + 1} (a callback set model.stop_training)."
                )
                break
        cbs.on_train_end()
    finally:
        stop.restore()
    duration = time.monotonic() - started
    history.summary = {
        "steps": int(step_var.numpy()),
        "duration_s": duration,
        "examples": trained_examples,
        "examples_per_sec": trained_examples / max(duration, 1e-9),
        "global_batch": plan.global_batch,
        "replicas": strategy.num_replicas_in_sync,
        "world_size": env.world_size,
        "strategy": type(strategy).__name__,
        "learning_rate": target_lr,
    }
    reporter.finish(history.history, {"summary": history.summary, "environment": env.describe()})
    return history


class _LearningRate:
    """Warm-up then the scaled rate; assigns the optimizer's variable only when the value changes."""

    def __init__(self, optimizer: Any, base: float, target: float, warmup_steps: int) -> None:
        self.optimizer, self.base, self.target, self.warmup = optimizer, base, target, warmup_steps
        self.current: float | None = None

    def update(self, step: int) -> None:
        value = lr_at(step, self.base, self.target, self.warmup)
        if value != self.current:
            self.optimizer.learning_rate.assign(value)
            self.current = value


def _evaluate(val: DistributedData, eval_step: Any, names: list[str]) -> dict[str, float]:
    totals = np.zeros(len(names) + 1)
    iterator = val.epoch(0)
    for _ in range(val.plan.steps_per_epoch):
        totals += eval_step(next(iterator)).numpy()[:-1]
    return {f"val_{name}": float(totals[i] / max(totals[-1], 1)) for i, name in enumerate(names)}


def _preempt(checkpointer: Any, step: int, signum: int) -> None:
    if checkpointer:
        checkpointer.save(step)
    # A warning on every worker (not a chief-only progress line): it explains the exit code in each log.
    saved = "checkpoint written" if checkpointer else "no checkpoint_dir, nothing saved"
    log.warning("stop requested (%s): %s at step %d; exiting.", signal.Signals(signum).name, saved, step)
    raise SystemExit(128 + signum)
