"""A script whose workers stop meeting: rank 0's own callback evaluates the model at each epoch end
(tfdist.evaluate all-reduces) while rank 1 goes on training, or (--sleep) rank 1's callback sleeps for
a minute. The job must end with one line, not hang.

usage: mismatch_fit.py [--sleep]
"""

import sys
import time

import numpy as np

import tfdist

strategy = tfdist.strategy()
import keras  # noqa: E402


class EvaluateOnChief(keras.callbacks.Callback):
    """A mistake users make: a collective inside a callback given to one worker only."""

    def on_epoch_end(self, epoch, logs=None):
        tfdist.evaluate(self.model, (X[:64], Y[:64]), batch_size=32)


rng = np.random.default_rng(0)
X = rng.normal(size=(256, 8)).astype("float32")
Y = X.sum(axis=1, keepdims=True)
with strategy.scope():
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")


class SleepOnOne(keras.callbacks.Callback):
    """A worker busy elsewhere (a slow upload, a debugger) while the others wait in the next step."""

    def on_epoch_end(self, epoch, logs=None):
        time.sleep(60)


if "--sleep" in sys.argv:
    callbacks = [SleepOnOne()] if tfdist.rank() == 1 else []
else:
    callbacks = [EvaluateOnChief()] if tfdist.rank() == 0 else []
tfdist.fit(model, (X, Y), batch_size=32, epochs=3, verbose=0, callbacks=callbacks)
