"""A Keras ``model.fit`` script with batch normalization under MultiWorkerMirroredStrategy (no tfdist import):
each worker saves its trainable weights, its non-trainable ones (the moving statistics) and its optimizer's
variables to OUT/state-<rank>.npz. ``--synchronized``: ``BatchNormalization(synchronized=True)``.

    python bn_fit.py OUT [--synchronized]
"""

import argparse
import os

import keras
import numpy as np
import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("out")
parser.add_argument("--synchronized", action="store_true")
args = parser.parse_args()

strategy = tf.distribute.MultiWorkerMirroredStrategy()
keras.utils.set_random_seed(3)
rng = np.random.default_rng(0)
x = rng.normal(size=(256, 6)).astype("float32")
y = (x.sum(axis=1) > 0).astype("int64")
with strategy.scope():
    model = keras.Sequential(
        [
            keras.Input((6,)),
            keras.layers.Dense(8),
            keras.layers.BatchNormalization(synchronized=args.synchronized),
            keras.layers.Dense(2),
        ]
    )
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss=loss)
model.fit(x, y, batch_size=32, epochs=2, verbose=0)


def flat(values):
    return np.concatenate([np.asarray(v).ravel() for v in values])


np.savez(
    os.path.join(args.out, f"state-{os.environ['TFDIST_RANK']}.npz"),
    trainable=flat(model.trainable_weights),
    statistics=flat(model.non_trainable_weights),
    optimizer=flat(model.optimizer.variables),
)
