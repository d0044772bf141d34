"""One rank of a benchmark that launches a training program (side_by_side.py, testhosts.py --variant
horovod): mnist-cnn on synthetic data, batch 64 per rank,
two epochs of STEPS steps; rank 0 writes the second (timed) epoch's examples/s of the job as JSON.

usage (through tfdist launch): _worker.py MODE STEPS OUT_JSON, MODE: ``tfdist-fit``; ``batch-callback``
(the same with a per-step logger, which makes tfdist read results after every step); ``hvd-tape`` (a
``DistributedGradientTape`` loop as Horovod's TensorFlow 2 example writes it).
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import keras
import tensorflow as tf

from tfdist.workloads import datasets, models

PER_RANK = 64


def horovod_tape(steps: int) -> tuple[float, int, int]:
    """examples/s of the timed epoch, this rank and the ranks."""
    import tfdist.horovod.tensorflow as hvd

    hvd.init()
    data = datasets.synthetic((28, 28, 1), 10, PER_RANK * 8)
    keras.utils.set_random_seed(0)
    model, optimizer = models.build("mnist-cnn", (28, 28, 1), 10), keras.optimizers.SGD(0.01)
    loss = keras.losses.SparseCategoricalCrossentropy()
    batches = (
        tf.data.Dataset.from_tensor_slices((data.x_train, data.y_train))
        .batch(PER_RANK, drop_remainder=True)
        .repeat()
    )
    batch = iter(batches)

    @tf.function
    def step(images: tf.Tensor, labels: tf.Tensor) -> tf.Tensor:
        with tf.GradientTape() as tape:
            value = loss(labels, model(images, training=True))
        tape = hvd.DistributedGradientTape(tape)
        grads = tape.gradient(value, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return value

    for _epoch in range(2):  # the first traces the step
        started = time.perf_counter()
        for _ in range(steps):
            value = step(*next(batch))
        float(value)  # the epoch's last step has run
    return steps * PER_RANK * hvd.size() / (time.perf_counter() - started), hvd.rank(), hvd.size()


class BatchLogger(keras.callbacks.Callback):
    """What an experiment logger does: keep every step's loss."""

    def __init__(self) -> None:
        super().__init__()
        self.losses: list[float] = []

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        self.losses.append(float(logs["loss"]))


def tfdist_fit(steps: int, callbacks: list[Any]) -> tuple[float, int, int]:
    """examples/s of the timed epoch, this rank and the ranks."""
    import tfdist

    strategy = tfdist.strategy()
    global_batch = PER_RANK * tfdist.num_replicas(strategy)
    data = datasets.synthetic((28, 28, 1), 10, global_batch * steps)
    keras.utils.set_random_seed(0)
    with strategy.scope():
        model = models.build("mnist-cnn", (28, 28, 1), 10)
        model.compile(optimizer=keras.optimizers.SGD(0.01), loss="sparse_categorical_crossentropy")
    fit = {"epochs": 2, "steps_per_epoch": steps, "callbacks": callbacks, "verbose": 0, "shuffle": False}
    history = tfdist.fit(model, (data.x_train, data.y_train), batch_size=global_batch, **fit)
    return float(history.history["examples_per_sec"][1]), max(tfdist.rank(), 0), tfdist.world_size()


def main() -> None:
    mode, steps, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    if mode == "hvd-tape":
        rate, rank, ranks = horovod_tape(steps)
    else:
        rate, rank, ranks = tfdist_fit(steps, [BatchLogger()] if mode == "batch-callback" else [])
    if rank == 0:
        with open(out, "w", encoding="utf-8") as fh:
            json.dump({"mode": mode, "examples_per_sec": rate, "ranks": ranks}, fh)


if __name__ == "__main__":
    main()
