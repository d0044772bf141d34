"""A plain tf.distribute script (does not import tfdist): MWMS + custom loop; saves final weights."""

import os
import sys

import numpy as np
import tensorflow as tf

strategy = tf.distribute.MultiWorkerMirroredStrategy()
GLOBAL_BATCH = 16
rng = np.random.default_rng(0)
x = rng.normal(size=(256, 4)).astype("float32")
y = (x @ np.array([1.0, -2.0, 0.5, 3.0], dtype="float32") + 0.1).reshape(-1, 1)
dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(GLOBAL_BATCH, drop_remainder=True).repeat()
dist = iter(strategy.experimental_distribute_dataset(dataset))

with strategy.scope():
    tf.keras.utils.set_random_seed(1)
    model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(1)])
    optimizer = tf.keras.optimizers.SGD(0.05)


@tf.function
def train_step(batch):
    def step(inputs):
        features, labels = inputs
        with tf.GradientTape() as tape:
            per_example = tf.reduce_mean(tf.square(model(features) - labels), axis=-1)
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=GLOBAL_BATCH)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=False))
        return loss

    return strategy.reduce("SUM", strategy.run(step, args=(batch,)), axis=None)


for _i in range(20):
    loss = train_step(next(dist))
print(f"final loss {float(loss):.5f} on {strategy.num_replicas_in_sync} replicas", flush=True)
weights = np.concatenate([w.numpy().ravel() for w in model.weights])
np.save(os.path.join(sys.argv[1], f"weights-{os.environ['TFDIST_RANK']}.npy"), weights)
