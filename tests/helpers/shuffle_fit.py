"""A plain model.fit script with Keras' default shuffle (no seed anywhere): records, per worker and epoch,
the example ids its training steps saw. Writes OUT/seen-R.json ([[ids of epoch 0], ...]).

usage: shuffle_fit.py OUT
"""

import json
import os
import sys

import keras
import numpy as np
import tensorflow as tf

strategy = tf.distribute.MultiWorkerMirroredStrategy()
out = sys.argv[1]
rank = int(os.environ.get("TFDIST_RANK", "0"))
EXAMPLES, EPOCHS = 64, 3
seen: list[list[int]] = [[]]


def record(ids: tf.Tensor) -> tf.Tensor:
    seen[-1].extend(int(i) for i in ids.numpy())
    return tf.constant(0.0)


class Record(keras.layers.Layer):
    """Passes the features on; in training, notes the ids of the batch (column 0)."""

    def call(self, inputs, training=False):
        if training:
            noted = tf.py_function(record, [tf.cast(inputs[:, 0], tf.int64)], tf.float32)
            noted.set_shape([])
            return inputs[:, 1:] + 0.0 * noted
        return inputs[:, 1:]


class NextEpoch(keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        seen.append([])


with strategy.scope():
    model = keras.Sequential([keras.Input((3,)), Record(), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
ids = np.arange(EXAMPLES, dtype="float32")[:, None]
features = np.random.default_rng(0).normal(size=(EXAMPLES, 2)).astype("float32")
x = np.concatenate([ids, features], axis=1)
model.fit(
    x, features.sum(axis=1, keepdims=True), batch_size=16, epochs=EPOCHS, verbose=0, callbacks=[NextEpoch()]
)
os.makedirs(out, exist_ok=True)
with open(os.path.join(out, f"seen-{rank}.json"), "w") as fh:
    json.dump(seen[:EPOCHS], fh)
