"""Callbacks on the chief only, as Horovod's and Keras' examples give them: tfdist.fit must give every worker
the same result as one process that runs them all.

usage: workers_differ.py OUT [--only NAME,...] [--raise-on RANK]
Writes OUT/NAME.rank-R.json (history, what the callbacks saw) and OUT/NAME.rank-R.weights.npy for every
scenario; the files the callbacks wrote go under OUT/NAME/. With --raise-on RANK, that rank's callback
raises at epoch 1, batch 3, and nothing else runs.
"""

import json
import os
import sys

import numpy as np

import tfdist

strategy = tfdist.strategy()
import keras  # noqa: E402

OUT = sys.argv[1]
ONLY = sys.argv[sys.argv.index("--only") + 1].split(",") if "--only" in sys.argv else None
RAISE_ON = int(sys.argv[sys.argv.index("--raise-on") + 1]) if "--raise-on" in sys.argv else None
RANK = max(tfdist.rank(), 0)
CHIEF = RANK == 0

rng = np.random.default_rng(0)
X = rng.normal(size=(384, 8)).astype("float32")  # 6 steps of a global batch of 64 per epoch
Y = np.argmax(X @ rng.normal(size=(8, 3)), axis=1).astype("int32")


class BatchLogger(keras.callbacks.Callback):
    """A user's per-batch callback: records the logs it is given (an experiment tracker would send them)."""

    def __init__(self) -> None:
        super().__init__()
        self.events = []

    def on_train_batch_end(self, batch, logs=None):
        self.events.append([batch, {k: float(v) for k, v in sorted(logs.items())}])


class RaiseAt(keras.callbacks.Callback):
    """A callback with a bug on one worker."""

    def __init__(self) -> None:
        super().__init__()
        self.epoch = 0

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        if (self.epoch, batch) == (1, 3):
            raise ValueError(f"the user's callback failed on rank {RANK} at batch 3")


def where(name: str, *parts: str) -> str:
    return os.path.join(OUT, name, *parts)


def chief_callbacks(name: str) -> list:
    """Each scenario's callbacks, as a script gives them to the chief only."""
    return {
        "tensorboard_batch": lambda: [keras.callbacks.TensorBoard(where(name, "tb"), update_freq="batch")],
        "tensorboard_n": lambda: [keras.callbacks.TensorBoard(where(name, "tb"), update_freq=4)],
        "checkpoint_epoch": lambda: [keras.callbacks.ModelCheckpoint(where(name, "m-{epoch}.keras"))],
        "checkpoint_n": lambda: [
            keras.callbacks.ModelCheckpoint(where(name, "w.weights.h5"), save_weights_only=True, save_freq=4)
        ],
        "csv": lambda: [keras.callbacks.CSVLogger(where(name, "log.csv"))],
        # Stops when the loss did not improve by 1.0 (never): after epoch 2 of 4, patience 1.
        "early_stopping": lambda: [keras.callbacks.EarlyStopping("loss", min_delta=1.0, patience=1)],
        "batch_logger": lambda: [BatchLogger()],
        "backup": lambda: [keras.callbacks.BackupAndRestore(where(name, "backup"), delete_checkpoint=False)],
    }[name]()


def run(name: str) -> None:
    keras.utils.set_random_seed(1)
    with strategy.scope():
        model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, "relu"), keras.layers.Dense(3)])
        model.compile(
            optimizer=keras.optimizers.Adam(0.01),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            metrics=["accuracy"],
        )
    callbacks = chief_callbacks(name) if CHIEF else []
    history = tfdist.fit(
        model, (X, Y), batch_size=64, epochs=4, shuffle=False, verbose=0, callbacks=callbacks, log_every=3
    )
    logger = next((cb for cb in callbacks if isinstance(cb, BatchLogger)), None)
    np.save(f"{OUT}/{name}.rank-{RANK}.weights.npy", np.concatenate([w.ravel() for w in model.get_weights()]))
    record = {
        "history": {
            k: [float(v) for v in vs] for k, vs in history.history.items() if k != "examples_per_sec"
        },
        "iterations": int(model.optimizer.iterations.numpy()),
        "events": logger.events if logger else None,
    }
    with open(f"{OUT}/{name}.rank-{RANK}.json", "w") as fh:
        json.dump(record, fh)


def run_raising() -> None:
    with strategy.scope():
        model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(3)])
        model.compile(optimizer="sgd", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    callbacks = [RaiseAt()] if RANK == RAISE_ON else []
    tfdist.fit(model, (X, Y), batch_size=64, epochs=3, verbose=0, callbacks=callbacks)


SCENARIOS = (
    "tensorboard_batch",
    "tensorboard_n",
    "checkpoint_epoch",
    "checkpoint_n",
    "csv",
    "early_stopping",
    "batch_logger",
    "backup",
)

os.makedirs(OUT, exist_ok=True)
if RAISE_ON is not None:
    run_raising()
else:
    for scenario in SCENARIOS:
        if ONLY is None or scenario in ONLY:
            os.makedirs(where(scenario), exist_ok=True)
            run(scenario)
