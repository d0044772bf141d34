"""One worker of benchmarks/batch_hooks.py: tfdist.fit on mnist-cnn (synthetic data) with or without a
callback that overrides a training batch hook; prints examples/s of the second (timed) epoch as JSON.

usage (through tfdist launch): _batch_hooks_worker.py MODE STEPS OUT_JSON   MODE: none | batch-callback
"""

from __future__ import annotations

import json
import sys
from typing import Any

import keras

import tfdist
from tfdist.workloads import datasets, models

mode, steps, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
strategy = tfdist.strategy()
GLOBAL = 64 * tfdist.num_replicas(strategy)
data = datasets.synthetic((28, 28, 1), 10, GLOBAL * steps)


class BatchLogger(keras.callbacks.Callback):
    """What an experiment logger does: keep every step's loss."""

    def __init__(self) -> None:
        super().__init__()
        self.losses: list[float] = []

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        self.losses.append(float(logs["loss"]))


keras.utils.set_random_seed(0)
with strategy.scope():
    model = models.build("mnist-cnn", (28, 28, 1), 10)
    model.compile(optimizer=keras.optimizers.SGD(0.01), loss="sparse_categorical_crossentropy")
callbacks = [BatchLogger()] if mode == "batch-callback" else []
history = tfdist.fit(
    model,
    (data.x_train, data.y_train),
    batch_size=GLOBAL,
    epochs=2,
    steps_per_epoch=steps,
    callbacks=callbacks,
    verbose=0,
)
if tfdist.is_chief():
    with open(out, "w") as f:
        json.dump({"examples_per_sec": history.history["examples_per_sec"][1]}, f)
