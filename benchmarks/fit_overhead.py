"""tfdist.fit throughput vs a hand-written tf.distribute loop and vs Keras 3 model.fit, side by side.

Same model (mnist-cnn on synthetic 28x28x1 data), same global batch, one device, alternating the three
configurations in every repeat; each measures a timed epoch after a warm-up epoch (tracing excluded).
    python benchmarks/fit_overhead.py --repeats 3 --steps 60 --out benchmarks/results/fit_overhead.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import keras
import numpy as np
import tensorflow as tf

import tfdist
from tfdist.workloads import datasets, models

sys.path.insert(0, str(Path(__file__).parent))  # the shared _common.py
from _common import alternate, medians, ratios, write_json

BATCH = 64
RATIOS = {
    "tfdist_vs_hand_loop": ("tfdist_fit", "hand_loop"),
    "tfdist_vs_keras_fit": ("tfdist_fit", "keras_model_fit"),
}


def compiled_model(strategy: Any) -> Any:
    keras.utils.set_random_seed(0)
    with strategy.scope():
        model = models.build("mnist-cnn", (28, 28, 1), 10)
        model.compile(
            optimizer=keras.optimizers.SGD(0.01), loss="sparse_categorical_crossentropy", metrics=["accuracy"]
        )
    return model


def run_tfdist(strategy: Any, x: np.ndarray, y: np.ndarray, steps: int) -> float:
    model = compiled_model(strategy)
    history = tfdist.fit(model, (x, y), batch_size=BATCH, epochs=2, steps_per_epoch=steps, verbose=0)
    return float(history.history["examples_per_sec"][1])


def run_hand_loop(strategy: Any, x: np.ndarray, y: np.ndarray, steps: int) -> float:
    model = compiled_model(strategy)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(reduction=None)
    dataset = (
        tf.data.Dataset.from_tensor_slices((x, y))
        .shuffle(len(x), seed=0)
        .batch(BATCH, drop_remainder=True)
        .repeat()
    )
    iterator = iter(strategy.experimental_distribute_dataset(dataset.prefetch(tf.data.AUTOTUNE)))

    @tf.function
    def step(batch: Any) -> Any:
        def replica(features: Any, labels: Any) -> Any:
            with tf.GradientTape() as tape:
                loss = tf.nn.compute_average_loss(
                    loss_fn(labels, model(features, training=True)), global_batch_size=BATCH
                )
            grads = tape.gradient(loss, model.trainable_variables)
            model.optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
            return loss

        return strategy.reduce("SUM", strategy.run(replica, args=batch), axis=None)

    for _ in range(steps):  # warm-up epoch, as for the others
        step(next(iterator))
    started = time.perf_counter()
    for _ in range(steps):
        loss = step(next(iterator))
    float(loss)
    return steps * BATCH / (time.perf_counter() - started)


class _EpochTimer(keras.callbacks.Callback):
    def __init__(self) -> None:
        super().__init__()
        self.seconds: list[float] = []

    def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
        self.started = time.perf_counter()

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        self.seconds.append(time.perf_counter() - self.started)


def run_keras_fit(strategy: Any, x: np.ndarray, y: np.ndarray, steps: int) -> float:
    model = compiled_model(strategy)
    timer = _EpochTimer()
    dataset = (
        tf.data.Dataset.from_tensor_slices((x, y))
        .shuffle(len(x), seed=0)
        .batch(BATCH, drop_remainder=True)
        .repeat()
    )
    model.fit(
        dataset.prefetch(tf.data.AUTOTUNE), epochs=2, steps_per_epoch=steps, verbose=0, callbacks=[timer]
    )
    return steps * BATCH / timer.seconds[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--out", default="benchmarks/results/fit_overhead.json")
    args = parser.parse_args()
    strategy = tfdist.strategy()
    data = datasets.synthetic((28, 28, 1), 10, BATCH * args.steps * 2)
    runners = {"tfdist_fit": run_tfdist, "hand_loop": run_hand_loop, "keras_model_fit": run_keras_fit}
    x, y, steps = data.x_train, data.y_train, args.steps
    results = alternate(list(runners), args.repeats, lambda name, _: runners[name](strategy, x, y, steps))
    median = medians(results)
    report = {
        "benchmark": "fit_overhead",
        "workload": "mnist-cnn, synthetic 28x28x1, global batch 64, one device",
        "strategy": type(strategy).__name__,
        "threads": {k: os.environ.get(k) for k in ("TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS")},
        "examples_per_sec": results,
        "median_examples_per_sec": median,
        **ratios(median, RATIOS),
        "goals": {"tfdist_vs_hand_loop": 0.98, "tfdist_vs_keras_fit": 0.95},
    }
    write_json(args.out, report)
    print(
        json.dumps(
            {k: report[k] for k in ("median_examples_per_sec", "tfdist_vs_hand_loop", "tfdist_vs_keras_fit")},
            indent=2,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
