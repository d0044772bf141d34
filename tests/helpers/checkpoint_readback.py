"""A Keras script under MultiWorkerMirroredStrategy (no tfdist import) whose every worker checkpoints to a
directory of its own (``tempfile.mkdtemp``, as Keras' own tests do) and reads the checkpoint back with
``model.load_weights`` and ``keras.models.load_model``; prints what it read.

    python checkpoint_readback.py
"""

import os
import tempfile

import keras
import numpy as np
import tensorflow as tf

strategy = tf.distribute.MultiWorkerMirroredStrategy()
rng = np.random.default_rng(0)
x = rng.normal(size=(128, 4)).astype("float32")
y = x.sum(axis=1, keepdims=True)
with strategy.scope():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
folder = tempfile.mkdtemp()
weights = os.path.join(folder, "ckpt-{epoch}.weights.h5")
whole = os.path.join(folder, "model.keras")
model.fit(
    x,
    y,
    batch_size=16,
    epochs=2,
    verbose=0,
    callbacks=[
        keras.callbacks.ModelCheckpoint(weights, save_weights_only=True),
        keras.callbacks.ModelCheckpoint(whole),
    ],
)
model.load_weights(weights.format(epoch=2))
loaded = keras.models.load_model(whole)
same = np.allclose(loaded.get_weights()[0], model.get_weights()[0])
print(f"rank {os.environ['TFDIST_RANK']} read back its checkpoints: {same}", flush=True)
