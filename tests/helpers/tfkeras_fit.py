"""A tf.keras (Keras 2, TF_USE_LEGACY_KERAS=1) script in three styles; saves rank R's final weights.

argv: OUT_DIR MODE, MODE one of: tfdist-fit (tfdist.fit), model-fit (model.fit under tfdist.strategy()),
horovod (import tfdist.horovod.tensorflow.keras as hvd: DistributedOptimizer and its callbacks),
horovod-accumulate (the same with backward_passes_per_step=2, averaged: each update the mean gradient of the
same 64 examples, in two passes of half the batch).
"""

import os
import sys

import numpy as np
import tensorflow as tf

out, mode = sys.argv[1], sys.argv[2]
assert tf.keras.__name__.startswith("tf_keras"), tf.keras.__name__  # Keras 2 is what this script uses

rng = np.random.default_rng(0)
x = rng.normal(size=(256, 6)).astype("float32")
y = (x @ rng.normal(size=(6, 1)) + 0.3).astype("float32")


def build() -> tf.keras.Model:
    tf.keras.utils.set_random_seed(42)
    return tf.keras.Sequential(
        [tf.keras.layers.Input((6,)), tf.keras.layers.Dense(8, activation="tanh"), tf.keras.layers.Dense(1)]
    )


if mode in ("horovod", "horovod-accumulate"):
    import tfdist.horovod.tensorflow.keras as hvd

    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    passes = 2 if mode == "horovod-accumulate" else 1
    model = build()
    optimizer = hvd.DistributedOptimizer(
        tf.keras.optimizers.SGD(0.05), backward_passes_per_step=passes, average_aggregated_gradients=True
    )
    model.compile(optimizer=optimizer, loss="mse", experimental_run_tf_function=False)
    callbacks = [hvd.callbacks.BroadcastGlobalVariablesCallback(0), hvd.callbacks.MetricAverageCallback()]
    # 64 examples per global step: each rank takes its interleaved share of every global batch.
    xs = np.concatenate([x[i : i + 64][rank::size] for i in range(0, 256, 64)])
    ys = np.concatenate([y[i : i + 64][rank::size] for i in range(0, 256, 64)])
    batch = 64 // size // passes
    model.fit(xs, ys, batch_size=batch, epochs=2, shuffle=False, callbacks=callbacks, verbose=0)
else:
    import tfdist

    strategy = tfdist.strategy()
    rank = tfdist.rank()
    with strategy.scope():
        model = build()
        model.compile(optimizer=tf.keras.optimizers.SGD(0.05), loss="mse")
    if mode == "tfdist-fit":
        tfdist.fit(model, (x, y), batch_size=64, epochs=2, shuffle=False, verbose=0)
    else:
        data = tf.data.Dataset.from_tensor_slices((x, y)).batch(64)
        model.fit(data, epochs=2, verbose=0)
weights = np.concatenate([w.numpy().ravel() for w in model.trainable_variables])
np.save(os.path.join(out, f"weights-{rank}.npy"), weights)
