"""One rank of benchmarks/horovod_tape.py: mnist-cnn on synthetic data, batch 64 per rank, trained either
with Horovod's API (a DistributedGradientTape custom loop, as Horovod's TensorFlow 2 example writes it) or
with tfdist.fit on the MPI backend; reports examples/s of the second (timed) epoch.

usage (through tfdist launch --backend mpi): _hvd_worker.py MODE STEPS OUT_JSON   MODE: hvd-tape | tfdist-fit
"""

from __future__ import annotations

import json
import sys
import time

import keras
import numpy as np
import tensorflow as tf

mode, steps, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
PER_RANK = 64


def mnist_cnn() -> keras.Model:
    keras.utils.set_random_seed(0)
    return keras.Sequential(
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


rng = np.random.default_rng(0)
x = rng.random((PER_RANK * 8, 28, 28, 1), dtype=np.float32)
y = rng.integers(0, 10, PER_RANK * 8).astype("int64")
loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

if mode == "hvd-tape":
    import tfdist.horovod.tensorflow as hvd

    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    model, opt = mnist_cnn(), keras.optimizers.SGD(0.01)
    data = iter(tf.data.Dataset.from_tensor_slices((x, y)).batch(PER_RANK, drop_remainder=True).repeat())

    @tf.function
    def step(images: tf.Tensor, labels: tf.Tensor) -> tf.Tensor:
        with tf.GradientTape() as tape:
            value = loss(labels, model(images, training=True))
        tape = hvd.DistributedGradientTape(tape)
        grads = tape.gradient(value, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return value

    rates = []
    for _epoch in range(2):
        started = time.perf_counter()
        for _ in range(steps):
            value = step(*next(data))
        float(value)  # the epoch's last step has run
        rates.append(steps * PER_RANK * size / (time.perf_counter() - started))
    rate = rates[1]
else:
    import tfdist

    strategy = tfdist.strategy()
    rank, size = tfdist.rank(), tfdist.world_size()
    with strategy.scope():
        model = mnist_cnn()
        model.compile(optimizer=keras.optimizers.SGD(0.01), loss=loss)
    history = tfdist.fit(
        model,
        (np.tile(x, (size, 1, 1, 1)), np.tile(y, size)),
        batch_size=PER_RANK * size,
        epochs=2,
        steps_per_epoch=steps,
        verbose=0,
        log_every=10,
        shuffle=False,
    )
    rate = float(history.history["examples_per_sec"][1])

if rank == 0:
    with open(out, "w", encoding="utf-8") as fh:
        json.dump({"mode": mode, "examples_per_sec": rate, "ranks": size}, fh)
