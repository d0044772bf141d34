"""tfdist.fit on a small regression model (fixed seeds, global batch 12: 1, 2 or 3 ranks split it evenly);
saves the final weights as OUT/weights-<rank>.npy.

argv: OUT_DIR. The MPI backend's buckets and wire come from TFDIST_BUCKET_MB / TFDIST_COMPRESSION.
"""

import os
import sys

import numpy as np

import tfdist

strategy = tfdist.strategy()
import keras  # noqa: E402

out = sys.argv[1]
rng = np.random.default_rng(0)
x = rng.normal(size=(240, 6)).astype("float32")
y = (x @ rng.normal(size=(6, 1)) + 0.3).astype("float32")
keras.utils.set_random_seed(42)
with strategy.scope():
    model = keras.Sequential(
        [keras.Input((6,)), keras.layers.Dense(8, activation="tanh"), keras.layers.Dense(1)]
    )
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse", metrics=["mae"])
tfdist.fit(model, (x, y), batch_size=12, epochs=3, steps_per_epoch=6, verbose=0)
weights = np.concatenate([w.ravel() for w in model.get_weights()])
np.save(os.path.join(out, f"weights-{max(tfdist.rank(), 0)}.npy"), weights)
