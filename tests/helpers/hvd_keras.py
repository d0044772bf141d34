"""A Keras training script written against Horovod's API, the way Horovod's Keras examples are.

    python hvd_keras.py OUT [--import horovod|tfdist] [--batch 32] [--warmup-epochs 0] [--lr-ranks N]

Data: scikit-learn's digits, each rank its shard (ds.shard(size, rank)); learning rate scaled by the
number of ranks (``--lr-ranks`` lets one process stand in for N ranks); DistributedOptimizer; broadcast,
metric averaging and (optionally) warm-up callbacks; a checkpoint and TensorBoard on rank 0 only. Writes
OUT/rank<R>.npz (final weights) and OUT/history-<R>.json.
"""

import argparse
import json
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf
from sklearn.datasets import load_digits

parser = argparse.ArgumentParser()
parser.add_argument("out")
parser.add_argument("--import", dest="module", default="tfdist", choices=("horovod", "tfdist"))
parser.add_argument("--batch", type=int, default=32)
parser.add_argument("--warmup-epochs", type=int, default=0)
parser.add_argument("--lr-ranks", type=int, default=0)
args = parser.parse_args()

if args.module == "horovod":
    import horovod.tensorflow.keras as hvd
else:
    import tfdist.horovod.tensorflow.keras as hvd

# Horovod: initialize Horovod.
hvd.init()

digits = load_digits()
x = (digits.data[:1536] / 16.0).astype("float32")
y = digits.target[:1536].astype("int64")
dataset = tf.data.Dataset.from_tensor_slices((x, y)).shard(hvd.size(), hvd.rank()).batch(args.batch)

keras.utils.set_random_seed(1234)  # the same initial weights on every rank
model = keras.Sequential(
    [
        keras.Input((64,)),
        keras.layers.Dense(32, activation="relu"),
        keras.layers.Dense(10, activation="softmax"),
    ]
)

# Horovod: adjust learning rate based on number of workers.
scaled_lr = 0.05 * (args.lr_ranks or hvd.size())
opt = keras.optimizers.SGD(scaled_lr)

# Horovod: add Horovod DistributedOptimizer.
opt = hvd.DistributedOptimizer(opt)

# Horovod: Specify `experimental_run_tf_function=False` to ensure TensorFlow uses hvd.DistributedOptimizer()
# to compute gradients (a tf.keras 2 argument: Horovod's examples still pass it).
model.compile(
    loss=keras.losses.SparseCategoricalCrossentropy(),
    optimizer=opt,
    metrics=["accuracy"],
    experimental_run_tf_function=False,
)

callbacks = [
    # Horovod: broadcast initial variable states from rank 0 to all other processes.
    hvd.callbacks.BroadcastGlobalVariablesCallback(0),
    # Horovod: average metrics among workers at the end of every epoch.
    hvd.callbacks.MetricAverageCallback(),
]
if args.warmup_epochs:
    # Horovod: using `lr = 1.0 * hvd.size()` from the very beginning leads to worse final accuracy.
    callbacks.append(
        hvd.callbacks.LearningRateWarmupCallback(
            initial_lr=scaled_lr, warmup_epochs=args.warmup_epochs, verbose=1
        )
    )

# Horovod: save checkpoints only on worker 0 to prevent other workers from corrupting them.
if hvd.rank() == 0:
    callbacks.append(keras.callbacks.ModelCheckpoint(str(Path(args.out) / "checkpoint-{epoch}.keras")))
    # ... and TensorBoard logs, per batch (a callback on one rank only: the ranks still train together).
    callbacks.append(keras.callbacks.TensorBoard(str(Path(args.out) / "tb"), update_freq=5))

# Horovod: write logs on worker 0.
verbose = 1 if hvd.rank() == 0 else 0

history = model.fit(dataset, epochs=3, callbacks=callbacks, verbose=verbose)

out = Path(args.out)
out.mkdir(parents=True, exist_ok=True)
np.savez(out / f"rank{hvd.rank()}.npz", *model.get_weights())
(out / f"history-{hvd.rank()}.json").write_text(json.dumps(history.history))
