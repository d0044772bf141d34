"""One worker of benchmarks/fit_multiworker.py: a tutorial-style MultiWorkerMirroredStrategy script that
trains mnist-cnn on synthetic data one of three ways and reports examples/s of its second (timed) epoch.

usage (through tfdist launch): _fit_worker.py MODE STEPS OUT_JSON   MODE: keras-fit | tfdist-fit | hand-loop
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import keras
import numpy as np
import tensorflow as tf

strategy = tf.distribute.MultiWorkerMirroredStrategy()  # as users write it: no tfdist import needed
mode, steps, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
PER_WORKER = 64
GLOBAL = PER_WORKER * strategy.num_replicas_in_sync

rng = np.random.default_rng(0)
x = rng.random((GLOBAL * 8, 28, 28, 1), dtype=np.float32)
y = rng.integers(0, 10, GLOBAL * 8).astype("int64")
data = tf.data.Dataset.from_tensor_slices((x, y)).batch(GLOBAL, drop_remainder=True).repeat()

with strategy.scope():
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [
            keras.Input((28, 28, 1)),
            keras.layers.Conv2D(32, 3, activation="relu"),
            keras.layers.Conv2D(64, 3, activation="relu"),
            keras.layers.MaxPooling2D(),
            keras.layers.Flatten(),
            keras.layers.Dense(128, activation="relu"),
            keras.layers.Dense(10),
        ]
    )
    model.compile(
        optimizer=keras.optimizers.SGD(0.01),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )


class EpochTimer(keras.callbacks.Callback):
    def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
        self.started = time.perf_counter()

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        self.seconds = time.perf_counter() - self.started


def hand_loop() -> float:
    """The TensorFlow tutorial's custom loop: strategy.run + compute_average_loss, loss reduced every step."""
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)
    iterator = iter(strategy.experimental_distribute_dataset(data))

    @tf.function
    def train_step(batch: Any) -> Any:
        def replica(features: Any, labels: Any) -> Any:
            with tf.GradientTape() as tape:
                loss = tf.nn.compute_average_loss(
                    loss_fn(labels, model(features, training=True)), global_batch_size=GLOBAL
                )
            grads = tape.gradient(loss, model.trainable_variables)
            model.optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
            return loss

        return strategy.reduce("SUM", strategy.run(replica, args=batch), axis=None)

    for _ in range(steps):  # warm-up epoch (tracing)
        train_step(next(iterator))
    started = time.perf_counter()
    for _ in range(steps):
        loss = train_step(next(iterator))
    float(loss)
    return steps * GLOBAL / (time.perf_counter() - started)


if mode == "keras-fit":
    timer = EpochTimer()
    model.fit(data, epochs=2, steps_per_epoch=steps, callbacks=[timer], verbose=0)
    rate = steps * GLOBAL / timer.seconds
elif mode == "tfdist-fit":
    import tfdist

    history = tfdist.fit(model, data, epochs=2, steps_per_epoch=steps, verbose=0)
    rate = float(history.history["examples_per_sec"][1])
elif mode == "hand-loop":
    rate = hand_loop()
else:
    raise SystemExit(f"unknown mode {mode!r}")
task = json.loads(__import__("os").environ.get("TF_CONFIG", "{}")).get("task", {})
if int(task.get("index", 0)) == 0:
    with open(out, "w") as f:
        json.dump({"mode": mode, "examples_per_sec": rate}, f)
