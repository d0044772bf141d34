"""tfdist.fit on a small regression model with fixed seeds; saves final weights per rank.

argv: OUT_DIR [--checkpoint DIR] [--crash] [--epochs E] [--steps S] [--workload mnist-cnn]
[--data arrays|dataset|fn]. With --crash, rank 1 SIGKILLs itself
after epoch 2 of its first attempt (the launcher restarts the group and the run resumes from the checkpoint).
"""

import json
import os
import signal
import sys

import numpy as np

import tfdist

strategy = tfdist.strategy()
import keras  # noqa: E402

out = sys.argv[1]


def option(name: str, default: str | None) -> str | None:
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default


ckpt = option("--checkpoint", None)
epochs, steps = int(option("--epochs", "3")), int(option("--steps", "4"))
rng = np.random.default_rng(0)
x = rng.normal(size=(max(200, 16 * steps), 6)).astype("float32")
y = (x @ rng.normal(size=(6, 1)) + 0.3).astype("float32")

keras.utils.set_random_seed(42)
with strategy.scope():
    if option("--workload", "small") == "mnist-cnn":  # the real workload on the embedded digits data
        from tfdist.workloads import datasets, models

        digits = datasets.digits()
        x, y = digits.x_train, digits.y_train
        model = models.build("mnist-cnn", digits.input_shape, digits.num_classes)
        model.compile(
            optimizer=keras.optimizers.SGD(0.05), loss="sparse_categorical_crossentropy", metrics=["accuracy"]
        )
    else:
        model = keras.Sequential(
            [
                keras.Input((6,)),
                keras.layers.Dense(8, activation="tanh", kernel_regularizer=keras.regularizers.l2(1e-3)),
                keras.layers.Dense(1),
            ]
        )
        model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse", metrics=["mae"])


def maybe_crash(epoch: int, logs: dict) -> None:
    if (
        "--crash" in sys.argv
        and epoch == 1
        and tfdist.rank() == 1
        and os.environ.get("TFDIST_RESTART_COUNT") == "0"
    ):
        os.kill(os.getpid(), signal.SIGKILL)


data, batch_size = (x, y), 16
if option("--data", "arrays") == "dataset":  # a batched tf.data pipeline (the batch size is read from it)
    import tensorflow as tf

    data, batch_size = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(len(x), seed=0).batch(16), None
elif option("--data", "arrays") == "fn":  # a dataset_fn(input_context)
    import tensorflow as tf

    def data(ctx):
        return (
            tf.data.Dataset.from_tensor_slices((x, y)).shuffle(len(x), seed=ctx.input_pipeline_id).batch(16)
        )


history = tfdist.fit(
    model,
    data,
    batch_size=batch_size,
    epochs=epochs,
    steps_per_epoch=steps,
    checkpoint_dir=ckpt,
    checkpoint_every=2,
    validation_data=(x[:50], y[:50]),
    callbacks=[keras.callbacks.LambdaCallback(on_epoch_end=maybe_crash)],
    verbose=0,
)
if ckpt:  # what this worker finds on disk the moment fit returns (the chief writes the checkpoints)
    import tensorflow as tf

    with open(os.path.join(out, f"latest-{max(tfdist.rank(), 0)}.txt"), "w") as fh:
        fh.write(os.path.basename(tf.train.latest_checkpoint(ckpt) or ""))
weights = np.concatenate([w.ravel() for w in model.get_weights()])
np.save(os.path.join(out, f"weights-{max(tfdist.rank(), 0)}.npy"), weights)
with open(os.path.join(out, f"history-{max(tfdist.rank(), 0)}.json"), "w") as fh:
    json.dump({"history": history.history, "steps": history.summary["steps"]}, fh)
