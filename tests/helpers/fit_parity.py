"""What `model.fit` promises, through tfdist.fit: per-batch callbacks, a partial last batch, class_weight,
validation_split, initial_epoch, validation_freq / validation_steps and a stop from a batch hook.

usage: fit_parity.py OUT [--keras] [--only NAME,...]
(--keras: Keras' own model.fit in one process, the reference). Writes OUT/NAME.rank-R.json and
OUT/NAME.rank-R.weights.npy for every scenario.
"""

import json
import os
import sys

import numpy as np

import tfdist

strategy = tfdist.strategy()
import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

OUT = sys.argv[1]
KERAS = "--keras" in sys.argv
ONLY = sys.argv[sys.argv.index("--only") + 1].split(",") if "--only" in sys.argv else None
RANK = max(tfdist.rank(), 0)

rng = np.random.default_rng(0)
X = rng.normal(size=(1000, 8)).astype("float32")  # 1000 = 15 x 64 + 40: a partial last batch
Y = np.argmax(X @ rng.normal(size=(8, 3)), axis=1).astype("int32")


class Recorder(keras.callbacks.Callback):
    """A per-batch learning-rate schedule and logger: what experiment trackers and schedules do."""

    def __init__(self, schedule: bool = True) -> None:
        super().__init__()
        self.schedule, self.events = schedule, []

    def on_train_batch_begin(self, batch, logs=None):
        if self.schedule:  # decays within each epoch, as a per-step schedule would
            self.model.optimizer.learning_rate.assign(0.1 / (1 + 0.05 * batch))
        self.events.append(["train_begin", batch, float(self.model.optimizer.learning_rate)])

    def on_train_batch_end(self, batch, logs=None):
        self.events.append(["train_end", batch, {k: float(v) for k, v in sorted(logs.items())}])

    def on_test_batch_end(self, batch, logs=None):
        self.events.append(["test_end", batch, {k: float(v) for k, v in sorted(logs.items())}])

    def on_epoch_end(self, epoch, logs=None):
        self.events.append(["epoch_end", epoch, float(self.model.optimizer.learning_rate)])


class StopAt(keras.callbacks.Callback):
    """Stops training from a batch hook at a given (epoch, batch)."""

    def __init__(self, epoch: int, batch: int, only_rank: int | None = None) -> None:
        super().__init__()
        self.at, self.epoch, self.only_rank = (epoch, batch), 0, only_rank

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        if (self.epoch, batch) == self.at and self.only_rank in (None, RANK):
            self.model.stop_training = True


def model_and_fit(name, data, fit_kwargs, callbacks=()):
    keras.utils.set_random_seed(3)
    with strategy.scope():
        model = keras.Sequential(
            [keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(3)]
        )
        model.compile(
            optimizer=keras.optimizers.SGD(0.1),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            metrics=["accuracy"],
        )
    kwargs = dict(fit_kwargs)
    if KERAS:
        if isinstance(data, tuple):
            history = model.fit(data[0], data[1], verbose=0, callbacks=list(callbacks), **kwargs)
        else:
            history = model.fit(data, verbose=0, callbacks=list(callbacks), **kwargs)
    else:
        history = tfdist.fit(model, data, verbose=0, callbacks=list(callbacks), **kwargs)
    result = {
        "history": history.history,
        "epochs": list(history.epoch),
        "iterations": int(model.optimizer.iterations),
    }
    for cb in callbacks:
        if isinstance(cb, Recorder):
            result["events"] = cb.events
    if not KERAS:
        result["steps"] = history.summary["steps"]
    np.save(
        os.path.join(OUT, f"{name}.rank-{RANK}.weights.npy"),
        np.concatenate([w.ravel() for w in model.get_weights()]),
    )
    with open(os.path.join(OUT, f"{name}.rank-{RANK}.json"), "w") as f:
        json.dump(result, f)


class InferenceRecorder(keras.callbacks.Callback):
    """Keras' evaluate / predict hooks: the running logs and each batch's outputs."""

    def __init__(self) -> None:
        super().__init__()
        self.events = []

    def on_test_batch_end(self, batch, logs=None):
        self.events.append(["test_end", batch, {k: float(v) for k, v in sorted(logs.items())}])

    def on_test_end(self, logs=None):
        self.events.append(["test_done", 0, {k: float(v) for k, v in sorted(logs.items())}])

    def on_predict_batch_end(self, batch, logs=None):
        outputs = np.asarray(logs["outputs"])
        self.events.append(["predict_end", batch, {"rows": float(len(outputs)), "sum": float(outputs.sum())}])


def evaluate_and_predict():
    """Trained weights, then evaluate and predict with callbacks on 1,000 examples (a partial last batch)."""
    keras.utils.set_random_seed(3)
    with strategy.scope():
        model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(3)])
        model.compile(
            optimizer=keras.optimizers.SGD(0.1),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            metrics=["accuracy"],
        )
    recorder = InferenceRecorder()
    if KERAS:
        model.evaluate(dataset(X, Y), callbacks=[recorder], verbose=0)
        model.predict(tf.data.Dataset.from_tensor_slices(X).batch(64), callbacks=[recorder], verbose=0)
    else:
        tfdist.evaluate(model, dataset(X, Y), callbacks=[recorder])
        tfdist.predict(model, tf.data.Dataset.from_tensor_slices(X).batch(64), callbacks=[recorder])
    result = {"history": {}, "epochs": [], "iterations": 0, "events": recorder.events}
    np.save(os.path.join(OUT, f"inference.rank-{RANK}.weights.npy"), np.zeros(1))
    with open(os.path.join(OUT, f"inference.rank-{RANK}.json"), "w") as f:
        json.dump(result, f)


def dataset(x, y, batch=64):
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(batch)


SCENARIOS = {
    # A partial last batch (40 of 64) trained as one process trains it, from arrays and from a dataset.
    "partial_arrays": lambda: model_and_fit(
        "partial_arrays", (X, Y), {"batch_size": 64, "epochs": 2, "shuffle": False}
    ),
    "partial_dataset": lambda: model_and_fit("partial_dataset", dataset(X, Y), {"epochs": 2}),
    # Per-batch hooks: a per-step learning-rate schedule and a logger of every batch's logs, with validation.
    "batch_hooks": lambda: model_and_fit(
        "batch_hooks",
        dataset(X[:640], Y[:640]),
        {"epochs": 2, "validation_data": dataset(X[640:], Y[640:], 128)},
        [Recorder()],
    ),
    "stop_in_batch": lambda: model_and_fit("stop_in_batch", dataset(X, Y), {"epochs": 3}, [StopAt(1, 4)]),
    # A stop that one worker's callback alone asks for (a timer, a file it watched): every worker stops.
    "stop_on_one_worker": lambda: model_and_fit(
        "stop_on_one_worker", dataset(X, Y), {"epochs": 3}, [StopAt(1, 4, only_rank=0)]
    ),
    "class_weight": lambda: model_and_fit(
        "class_weight",
        (X, Y),
        {"batch_size": 64, "epochs": 2, "shuffle": False, "class_weight": {0: 0.5, 1: 2.0, 2: 1.0}},
    ),
    "validation_split": lambda: model_and_fit(
        "validation_split", (X, Y), {"batch_size": 64, "epochs": 2, "shuffle": False, "validation_split": 0.2}
    ),
    "initial_epoch": lambda: model_and_fit("initial_epoch", dataset(X, Y), {"epochs": 3, "initial_epoch": 1}),
    "validation_freq_steps": lambda: model_and_fit(
        "validation_freq_steps",
        dataset(X[:640], Y[:640]),
        {
            "epochs": 4,
            "validation_data": dataset(X[640:], Y[640:], 64),
            "validation_freq": [2, 3],
            "validation_steps": 2,
        },
        [Recorder(schedule=False)],
    ),
    "inference": evaluate_and_predict,
}

for scenario_name, run in SCENARIOS.items():
    if ONLY is None or scenario_name in ONLY:
        run()
