"""tfdist.fit of a small two-layer model (63 weights: shards of uneven ends on 2 and 4 ranks) with one
optimizer, sharded or not: the run that one process must equal.

usage: shard_fit.py OUT OPTIMIZER [--shard] [--epochs N] [--checkpoint DIR] [--bucket-mb MB]
OPTIMIZER: sgd (momentum), adam (with a learning-rate schedule), adamw, rmsprop (momentum, centered).
``--bucket-mb`` passes bucket_mb (the 63 weights are 252 bytes: 0.00005 MB makes 2 buckets).
``--shard`` passes shard_optimizer=True; without it TFDIST_SHARD_OPTIMIZER decides. Writes
OUT/weights-R.npy (every weight, flat) and OUT/result-R.json (history, optimizer iterations).
"""

import json
import os
import sys

import numpy as np

import tfdist

strategy = tfdist.strategy()
import keras  # noqa: E402

OUT, OPTIMIZER = sys.argv[1], sys.argv[2]
SHARD = True if "--shard" in sys.argv else None
EPOCHS = int(sys.argv[sys.argv.index("--epochs") + 1]) if "--epochs" in sys.argv else 2
CHECKPOINT = sys.argv[sys.argv.index("--checkpoint") + 1] if "--checkpoint" in sys.argv else None
BUCKET_MB = float(sys.argv[sys.argv.index("--bucket-mb") + 1]) if "--bucket-mb" in sys.argv else None
RANK = max(tfdist.rank(), 0)


def optimizer() -> keras.optimizers.Optimizer:
    if OPTIMIZER == "sgd":
        return keras.optimizers.SGD(0.05, momentum=0.9)
    if OPTIMIZER == "adam":
        return keras.optimizers.Adam(keras.optimizers.schedules.ExponentialDecay(0.02, 4, 0.7))
    if OPTIMIZER == "adamw":
        return keras.optimizers.AdamW(0.01, weight_decay=0.05)
    if OPTIMIZER == "rmsprop":
        return keras.optimizers.RMSprop(0.005, momentum=0.5, centered=True)
    raise SystemExit(f"unknown optimizer {OPTIMIZER}")


rng = np.random.default_rng(0)
X = rng.normal(size=(256, 8)).astype("float32")
Y = (X @ rng.normal(size=(8, 3))).astype("float32")
keras.utils.set_random_seed(3)
with strategy.scope():
    model = keras.Sequential(
        [keras.Input((8,)), keras.layers.Dense(5, activation="tanh"), keras.layers.Dense(3)]
    )
    model.compile(optimizer=optimizer(), loss="mse", metrics=["mae"])
history = tfdist.fit(
    model,
    (X, Y),
    epochs=EPOCHS,
    batch_size=32,
    shuffle=False,
    verbose=0,
    shard_optimizer=SHARD,
    checkpoint_dir=CHECKPOINT,
    bucket_mb=BUCKET_MB,
)
np.save(os.path.join(OUT, f"weights-{RANK}.npy"), np.concatenate([w.ravel() for w in model.get_weights()]))
result = {"history": history.history, "iterations": int(model.optimizer.iterations)}
result["history"].pop("examples_per_sec", None)  # local timing
with open(os.path.join(OUT, f"result-{RANK}.json"), "w") as f:
    json.dump(result, f)
