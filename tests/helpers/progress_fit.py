"""A plain model.fit script with Keras' default progress bar (verbose=1): 3 epochs of 40 steps, each step
slowed to ~50 ms by a callback, so a progress line is on screen for a while."""

import time

import keras
import numpy as np
import tensorflow as tf

strategy = tf.distribute.MultiWorkerMirroredStrategy()
with strategy.scope():
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")


class Slow(keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        time.sleep(0.05)


x = np.random.default_rng(0).normal(size=(2560, 8)).astype("float32")
model.fit(x, x.sum(axis=1, keepdims=True), batch_size=64, epochs=3, verbose=1, callbacks=[Slow()])
