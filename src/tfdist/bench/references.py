"""Reference programs of ``tfdist bench --compare``, written as TensorFlow's and Keras's tutorials write
them, with no tfdist API inside: ``raw-tf`` (the multi-worker custom loop, the loss reduced every step)
and ``keras-fit`` (``model.fit``, through tfdist's Keras fix). ``python -m tfdist.bench.references
raw-tf|keras-fit SPEC_JSON``; the chief writes ``bench.json`` in the bench worker's format.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tfdist import files
from tfdist.bench.config import WorkerSpec
from tfdist.worker.contract import RunFiles


class Timeline:
    """(step, wall time) at the first step and at every ``every`` steps."""

    def __init__(self, every: int) -> None:
        self.every = every
        self.points: list[tuple[int, float]] = []
        self.first_step_at: float | None = None

    def mark(self, step: int, value: Any) -> None:
        """Record ``step`` (1-based) when it is the first or ends a block; reads ``value`` to wait for it."""
        if step == 1 or step % self.every == 0:
            float(value)  # the step's result on the host: the step has finished
            now = time.time()
            if step == 1:
                self.first_step_at = now
            if step % self.every == 0:
                self.points.append((step, now))


def _setup(spec: WorkerSpec) -> tuple[Any, Any, Any, int, Any]:
    """Strategy, data, model built in its scope, global batch and the per-example loss."""
    import keras
    import tensorflow as tf

    from tfdist.workloads import datasets, models

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    data = datasets.load(spec.dataset, seed=spec.seed)
    global_batch = spec.batch_size_per_replica * strategy.num_replicas_in_sync
    keras.utils.set_random_seed(spec.seed)
    with strategy.scope():
        model = models.build(spec.workload, data.input_shape, data.num_classes)
    regression = spec.workload == "regression"
    loss = "mse" if regression else "sparse_categorical_crossentropy"
    return strategy, data, model, global_batch, loss


def _dataset(data: Any, global_batch: int, seed: int) -> Any:
    import tensorflow as tf

    ds = tf.data.Dataset.from_tensor_slices((data.x_train, data.y_train)).shuffle(4096, seed=seed)
    return ds.repeat().batch(global_batch, drop_remainder=True).prefetch(tf.data.AUTOTUNE)


def _optimizer() -> Any:
    import keras

    return keras.optimizers.SGD(0.01, momentum=0.9)  # the bench workers' optimizer (tfdist train's default)


def raw_tf(spec: WorkerSpec) -> tuple[dict[str, Any], bool]:
    """The tutorial's hand-written loop: the result, and whether this worker is the chief."""
    import keras
    import tensorflow as tf

    strategy, data, model, global_batch, loss_name = _setup(spec)
    per_example = keras.losses.get(loss_name)  # no reduction: one loss per example
    with strategy.scope():
        optimizer = _optimizer()
        accuracy = keras.metrics.SparseCategoricalAccuracy() if loss_name != "mse" else None
    iterator = iter(strategy.experimental_distribute_dataset(_dataset(data, global_batch, spec.seed)))

    @tf.function
    def train_step(iterator: Any) -> Any:
        def step_fn(x: Any, y: Any) -> Any:
            with tf.GradientTape() as tape:
                predictions = model(x, training=True)
                loss = tf.nn.compute_average_loss(per_example(y, predictions), global_batch_size=global_batch)
                if model.losses:
                    loss += tf.nn.scale_regularization_loss(tf.add_n(model.losses))
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
            if accuracy is not None:
                accuracy.update_state(y, predictions)
            return loss

        per_replica = strategy.run(step_fn, args=next(iterator))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

    timeline = Timeline(spec.log_every)
    for step in range(1, spec.warmup + spec.steps + 1):
        timeline.mark(step, train_step(iterator))
    return _result(spec, model, global_batch, timeline), bool(strategy.extended.should_checkpoint)


def keras_fit(spec: WorkerSpec) -> tuple[dict[str, Any], bool]:
    """``model.fit`` as Keras's multi-worker tutorial writes it."""
    import keras

    strategy, data, model, global_batch, loss_name = _setup(spec)
    timeline = Timeline(spec.log_every)

    class Timed(keras.callbacks.Callback):
        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            timeline.mark(batch + 1, (logs or {})["loss"])

    with strategy.scope():
        model.compile(
            optimizer=_optimizer(), loss=loss_name, metrics=["mae" if loss_name == "mse" else "accuracy"]
        )
    model.fit(
        _dataset(data, global_batch, spec.seed),
        epochs=1,
        steps_per_epoch=spec.warmup + spec.steps,
        callbacks=[Timed()],
        verbose=0,
    )
    return _result(spec, model, global_batch, timeline), bool(strategy.extended.should_checkpoint)


def _result(spec: WorkerSpec, model: Any, global_batch: int, timeline: Timeline) -> dict[str, Any]:
    return {
        "mode": spec.mode,
        "params": int(model.count_params()),
        "global_batch": global_batch,
        "pid": os.getpid(),
        "first_step_at": timeline.first_step_at,
        "timeline": timeline.points,
    }


PROGRAMS = {"raw-tf": raw_tf, "keras-fit": keras_fit}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m tfdist.bench.references``."""
    given = list(sys.argv[1:] if argv is None else argv)
    if len(given) != 2 or given[0] not in PROGRAMS:
        sys.stderr.write(
            f"usage: python -m tfdist.bench.references {{{','.join(PROGRAMS)}}} SPEC_JSON (written by "
            "tfdist bench)\n"
        )
        return 2
    spec = WorkerSpec.from_json(given[1])
    result, chief = PROGRAMS[given[0]](spec)
    if chief:
        out = Path(spec.run_dir)
        out.mkdir(parents=True, exist_ok=True)
        files.write_json(RunFiles(str(out)).bench, result, default=float)
    return 0


if __name__ == "__main__":
    sys.exit(main())
