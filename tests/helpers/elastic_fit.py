"""tfdist.fit with a fixed GLOBAL batch of 12 (any 1, 2, 3 or 4 workers share it) and step-exact checkpoints.

argv: OUT_DIR CKPT_DIR [--epochs E] [--steps S] [--pace SECONDS] [--batch B] [--wide N]
Rank 0 writes OUT_DIR/progress (the last finished global step) so a test knows when to break something;
``--pace`` sleeps after every step so there is a mid-run to break; ``--wide N`` adds a hidden layer of N
units (N=512: 266k weights, ~1 MB a step for the links to carry). Every worker saves its final weights.
"""

import json
import os
import sys
import time

import numpy as np

import tfdist

strategy = tfdist.strategy()
import keras  # noqa: E402

out, ckpt = sys.argv[1], sys.argv[2]


def option(name: str, default: str) -> str:
    # The last occurrence wins: a test may override an option given before.
    return sys.argv[len(sys.argv) - 1 - sys.argv[::-1].index(name) + 1] if name in sys.argv else default


epochs, steps = int(option("--epochs", "4")), int(option("--steps", "6"))
pace, batch = float(option("--pace", "0")), int(option("--batch", "12"))
wide = int(option("--wide", "0"))
rng = np.random.default_rng(0)
x = rng.normal(size=(240, 6)).astype("float32")
y = (x @ rng.normal(size=(6, 1)) + 0.3).astype("float32")
keras.utils.set_random_seed(42)
with strategy.scope():
    hidden = [keras.layers.Dense(wide, activation="tanh")] if wide else []
    model = keras.Sequential(
        [keras.Input((6,)), keras.layers.Dense(wide or 8, activation="tanh"), *hidden, keras.layers.Dense(1)]
    )
    model.compile(optimizer=keras.optimizers.SGD(0.05, momentum=0.9), loss="mse")
rank = max(tfdist.rank(), 0)


class Progress(keras.callbacks.Callback):
    """The global step, written by rank 0 after each step (atomically: a reader never sees half)."""

    def __init__(self) -> None:
        super().__init__()
        self.step = 0

    def on_train_batch_end(self, batch, logs=None) -> None:
        self.step = int(self.model.optimizer.iterations.numpy())
        if rank == 0:
            with open(os.path.join(out, "progress.tmp"), "w") as fh:
                fh.write(str(self.step))
            os.replace(os.path.join(out, "progress.tmp"), os.path.join(out, "progress"))
        if pace:
            time.sleep(pace)


history = tfdist.fit(
    model,
    (x, y),
    batch_size=batch,
    epochs=epochs,
    steps_per_epoch=steps,
    checkpoint_dir=ckpt,
    checkpoint_every=1,
    callbacks=[Progress()],
    verbose=0,
)
weights = np.concatenate([w.ravel() for w in model.get_weights()])
np.save(os.path.join(out, f"weights-{rank}.npy"), weights)
with open(os.path.join(out, f"run-{rank}.json"), "w") as fh:
    json.dump({"world": tfdist.world_size(), "loss": history.history["loss"]}, fh)
