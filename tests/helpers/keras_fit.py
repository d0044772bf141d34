"""A Keras tutorial-style script (no tfdist import): MultiWorkerMirroredStrategy + model.fit with
validation data and the usual callbacks, then evaluate and predict. Writes what it got to OUT/rank-R.*.

usage: keras_fit.py OUT [--shared DIR]   (DIR: where every worker points its file-writing callbacks)
"""

import argparse
import json
import os
import typing

import keras
import numpy as np
import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("out")
parser.add_argument("--shared", default=None)
parser.add_argument("--epochs", type=int, default=4)
parser.add_argument("--steps-per-execution", type=int, default=1)
parser.add_argument("--shuffle", action="store_true", help="shuffle the training data without a seed")
parser.add_argument("--plain", action="store_true", help="no stateful callbacks (EarlyStopping, LR changes)")
parser.add_argument(
    "--crash-at-epoch", type=int, default=None, help="last worker exits there, first attempt only"
)
parser.add_argument(
    "--adam", action="store_true", help="Adam (optimizer state a resume must restore), not SGD"
)
parser.add_argument(
    "--read-rate",
    action="store_true",
    help="float(model.optimizer.learning_rate) in a callback (needs the fix)",
)
args = parser.parse_args()

strategy = tf.distribute.MultiWorkerMirroredStrategy()
rank = int(json.loads(os.environ.get("TF_CONFIG", "{}")).get("task", {}).get("index", 0))
GLOBAL_BATCH = 48  # divisible by 1, 2 and 3 workers

rng = np.random.default_rng(0)
x = rng.normal(size=(480, 8)).astype("float32")
w_true = rng.normal(size=(8,)).astype("float32")
y = (x @ w_true > 0).astype("int32")
x_val = rng.normal(size=(96, 8)).astype("float32")
y_val = (x_val @ w_true > 0).astype("int32")
train = tf.data.Dataset.from_tensor_slices((x, y))
train = (train.shuffle(480) if args.shuffle else train).batch(GLOBAL_BATCH)
val = tf.data.Dataset.from_tensor_slices((x_val, y_val)).batch(GLOBAL_BATCH)

with strategy.scope():
    keras.utils.set_random_seed(1)
    model = keras.Sequential(
        [keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(2)]
    )
    model.compile(
        optimizer=keras.optimizers.Adam(0.01) if args.adam else keras.optimizers.SGD(0.1),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy", keras.metrics.SparseTopKCategoricalAccuracy(k=1, name="top1")],
        steps_per_execution=args.steps_per_execution,
    )


class CrashOnce(keras.callbacks.Callback):
    """Kills the last worker at the start of an epoch on the first attempt, as a node failure would."""

    def on_epoch_begin(self, epoch, logs=None):
        last = os.environ.get("TFDIST_WORLD_SIZE") == str(rank + 1)
        if epoch == args.crash_at_epoch and last and os.environ.get("TFDIST_RESTART_COUNT") == "0":
            os._exit(3)


class RateReader(keras.callbacks.Callback):
    """Reads the learning rate as per-step schedules and loggers do: float() of the optimizer's variable."""

    rates: typing.ClassVar[list] = []

    def on_epoch_end(self, epoch, logs=None):
        self.rates.append(float(self.model.optimizer.learning_rate))


callbacks = [keras.callbacks.TerminateOnNaN(), CrashOnce(), *([RateReader()] if args.read_rate else [])]
if not args.plain:
    callbacks += [
        keras.callbacks.EarlyStopping(monitor="val_loss", patience=2),
        keras.callbacks.ReduceLROnPlateau(monitor="loss", factor=0.5, patience=1, min_delta=1.0),
        keras.callbacks.LearningRateScheduler(lambda epoch, lr: lr * 0.9),
    ]
if args.shared:
    callbacks += [
        keras.callbacks.ModelCheckpoint(os.path.join(args.shared, "ckpt-{epoch:02d}.keras")),
        keras.callbacks.CSVLogger(os.path.join(args.shared, "log.csv")),
        keras.callbacks.BackupAndRestore(os.path.join(args.shared, "backup"), delete_checkpoint=False),
        keras.callbacks.TensorBoard(os.path.join(args.shared, "tb")),
    ]

history = model.fit(train, epochs=args.epochs, validation_data=val, callbacks=callbacks, verbose=2)
evaluation = model.evaluate(val, return_dict=True, verbose=0)
predictions = model.predict(tf.data.Dataset.from_tensor_slices(x_val[:90]).batch(GLOBAL_BATCH), verbose=0)

np.save(
    os.path.join(args.out, f"rank-{rank}.weights.npy"),
    np.concatenate([w.ravel() for w in model.get_weights()]),
)
np.save(os.path.join(args.out, f"rank-{rank}.predictions.npy"), predictions)
with open(os.path.join(args.out, f"rank-{rank}.json"), "w") as f:
    json.dump(
        {
            "history": history.history,
            "evaluate": evaluation,
            "lr": float(model.optimizer.learning_rate.numpy()),
            "rates_read_in_callback": RateReader.rates,
        },
        f,
    )
print(f"rank {rank}: evaluate {evaluation}", flush=True)
