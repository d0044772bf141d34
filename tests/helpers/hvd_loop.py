"""A custom training loop written against Horovod's API, the way Horovod's TensorFlow 2 example is:
DistributedGradientTape, and the variables broadcast from rank 0 after the first step.

    python hvd_loop.py OUT [--batch 32] [--steps 24]

Writes OUT/rank<R>.npz (final weights) and OUT/losses-<R>.json.
"""

import argparse
import json
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf
from sklearn.datasets import load_digits

import tfdist.horovod.tensorflow as hvd

parser = argparse.ArgumentParser()
parser.add_argument("out")
parser.add_argument("--batch", type=int, default=32)
parser.add_argument("--steps", type=int, default=24)
args = parser.parse_args()

# Horovod: initialize Horovod.
hvd.init()

digits = load_digits()
x = (digits.data[:1536] / 16.0).astype("float32")
y = digits.target[:1536].astype("int64")
dataset = tf.data.Dataset.from_tensor_slices((x, y)).shard(hvd.size(), hvd.rank()).repeat().batch(args.batch)

keras.utils.set_random_seed(7)
mnist_model = keras.Sequential(
    [keras.Input((64,)), keras.layers.Dense(32, activation="tanh"), keras.layers.Dense(10)]
)
loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

# Horovod: adjust learning rate based on number of workers (here: the same global batch either way).
opt = keras.optimizers.Adam(0.01)


@tf.function
def training_step(images, labels, first_batch):
    with tf.GradientTape() as tape:
        probs = mnist_model(images, training=True)
        loss_value = loss(labels, probs)

    # Horovod: add Horovod Distributed GradientTape.
    tape = hvd.DistributedGradientTape(tape)

    grads = tape.gradient(loss_value, mnist_model.trainable_variables)
    opt.apply_gradients(zip(grads, mnist_model.trainable_variables))  # noqa: B905 (as tutorials write it)

    # Horovod: broadcast initial variable states from rank 0 to all other processes.
    # This is necessary to ensure consistent initialization of all workers when
    # training is started with random weights or restored from a checkpoint.
    #
    # Note: broadcast should be done after the first gradient step to ensure optimizer
    # initialization.
    if first_batch:
        hvd.broadcast_variables(mnist_model.variables, root_rank=0)
        hvd.broadcast_variables(opt.variables(), root_rank=0)

    return loss_value


losses = []
for batch, (images, labels) in enumerate(dataset.take(args.steps)):
    loss_value = training_step(images, labels, batch == 0)
    losses.append(float(hvd.allreduce(loss_value)))
    if batch % 10 == 0 and hvd.local_rank() == 0:
        print(f"Step #{batch}\tLoss: {loss_value:.6f}")

out = Path(args.out)
out.mkdir(parents=True, exist_ok=True)
np.savez(out / f"rank{hvd.rank()}.npz", *mnist_model.get_weights())
(out / f"losses-{hvd.rank()}.json").write_text(json.dumps(losses))
