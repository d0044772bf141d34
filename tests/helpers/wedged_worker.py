"""A training script whose worker 1 wedges, as a stuck data loader or a deadlock would (it does not import
tfdist): ``python wedged_worker.py [fit|loop|hvd]``.

- ``fit``: Keras ``model.fit`` under MultiWorkerMirroredStrategy; worker 1 sleeps in a per-batch callback;
- ``loop``: TensorFlow's tutorial loop (``strategy.run`` in a ``tf.function``, the reduce eager);
- ``hvd``: Horovod's TensorFlow 2 loop (``DistributedGradientTape``), for ``--backend horovod``.
"""

import os
import sys
import time

import numpy as np
import tensorflow as tf

WEDGE_AT = 3
MODE = (sys.argv[1:] or ["fit"])[0]
rng = np.random.default_rng(0)
x = rng.normal(size=(512, 4)).astype("float32")
y = x.sum(axis=1, keepdims=True)
rank = int(os.environ.get("TFDIST_RANK", os.environ.get("PMI_RANK", "0")))


def wedge(batch: int) -> None:
    if rank == 1 and batch == WEDGE_AT:
        print(f"wedged at {time.time():.3f}", flush=True)
        time.sleep(3600)  # the stuck worker


class Wedge(tf.keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        wedge(batch)


if MODE == "hvd":
    import horovod.tensorflow as hvd

    hvd.init()
    model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(1)])
    opt = tf.keras.optimizers.SGD(0.01)

    @tf.function
    def training_step(features, labels):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(features) - labels))
        tape = hvd.DistributedGradientTape(tape)
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss

    for step in range(100):
        training_step(x[:16], y[:16])
        wedge(step)
    sys.exit(0)

strategy = tf.distribute.MultiWorkerMirroredStrategy()
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")

if MODE == "loop":
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(16).repeat()
    batches = iter(strategy.experimental_distribute_dataset(dataset))

    @tf.function
    def train_step(batch):
        return strategy.run(lambda b: tf.reduce_sum(b[0]), args=(batch,))

    for step in range(100):
        strategy.reduce("SUM", train_step(next(batches)), axis=None)
        wedge(step)
else:
    model.fit(x, y, batch_size=16, epochs=3, verbose=2, callbacks=[Wedge()])
print("finished", flush=True)
