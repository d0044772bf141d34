"""A plain Keras script (no tfdist import): MultiWorkerMirroredStrategy + model.fit with
keras.callbacks.BackupAndRestore, a fixed GLOBAL batch of 12 (1, 2, 3 or 4 workers share it).

argv: OUT_DIR BACKUP_DIR [--epochs E] [--pace SECONDS]
Each epoch is 5 global batches of the same 60 examples in the same order (no shuffle). The chief writes
OUT_DIR/progress (global steps so far) so a test knows when to break something; ``--pace`` sleeps after
each step. Every worker saves its final weights and the world size it ended with.
"""

import json
import os
import sys
import time

import keras
import numpy as np
import tensorflow as tf

strategy = tf.distribute.MultiWorkerMirroredStrategy()
out, backup = sys.argv[1], sys.argv[2]


def option(name: str, default: str) -> str:
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default


epochs, pace = int(option("--epochs", "4")), float(option("--pace", "0"))
cluster = json.loads(os.environ.get("TF_CONFIG", "{}"))
rank = int(cluster.get("task", {}).get("index", 0))
world = len(cluster.get("cluster", {}).get("worker", [])) or 1
GLOBAL_BATCH = 12
rng = np.random.default_rng(0)
x = rng.normal(size=(60, 6)).astype("float32")
y = (x @ rng.normal(size=(6, 1)) + 0.3).astype("float32")
data = tf.data.Dataset.from_tensor_slices((x, y)).batch(GLOBAL_BATCH)
keras.utils.set_random_seed(42)
with strategy.scope():
    model = keras.Sequential(
        [keras.Input((6,)), keras.layers.Dense(8, activation="tanh"), keras.layers.Dense(1)]
    )
    model.compile(optimizer=keras.optimizers.SGD(0.05, momentum=0.9), loss="mse")


class Progress(keras.callbacks.Callback):
    """Global steps so far (rank 0, atomically), and a pause after each step."""

    def on_train_batch_end(self, batch, logs=None) -> None:
        if rank == 0:
            with open(os.path.join(out, "progress.tmp"), "w") as fh:
                fh.write(str(int(self.model.optimizer.iterations.numpy())))
            os.replace(os.path.join(out, "progress.tmp"), os.path.join(out, "progress"))
        if pace:
            time.sleep(pace)


history = model.fit(
    data,
    epochs=epochs,
    callbacks=[keras.callbacks.BackupAndRestore(backup), Progress()],
    verbose=0,
)
weights = np.concatenate([w.ravel() for w in model.get_weights()])
np.save(os.path.join(out, f"weights-{rank}.npy"), weights)
with open(os.path.join(out, f"run-{rank}.json"), "w") as fh:
    json.dump({"world": world, "epochs_run": len(history.history["loss"])}, fh)
