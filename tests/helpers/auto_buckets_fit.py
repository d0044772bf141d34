"""tfdist.fit of a model whose gradient is large against its compute (2.1M weights, 4 rows per rank a
step): the MPI backend's sum after the backward pass is most of each step, which ``auto`` buckets measure.

argv: OUT_DIR. Writes OUT_DIR/weights-R.npy (every weight, flat).
"""

import os
import sys

import numpy as np

import tfdist

strategy = tfdist.strategy()
import keras  # noqa: E402

out = sys.argv[1]
rng = np.random.default_rng(0)
x = rng.normal(size=(192, 1024)).astype("float32")
y = x[:, :1] * 0.5
keras.utils.set_random_seed(7)
with strategy.scope():
    model = keras.Sequential(
        [
            keras.Input((1024,)),
            keras.layers.Dense(1024, activation="tanh"),
            keras.layers.Dense(1024, activation="tanh"),
            keras.layers.Dense(1),
        ]
    )
    model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse")
tfdist.fit(model, (x, y), epochs=3, batch_size=8, shuffle=False, verbose=0)
weights = np.concatenate([w.ravel() for w in model.get_weights()])
np.save(os.path.join(out, f"weights-{max(tfdist.rank(), 0)}.npy"), weights)
