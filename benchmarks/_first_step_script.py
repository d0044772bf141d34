"""Workload for launch_to_first_step.py: build a strategy, take one training step, print the wall time.

Under `tfdist launch` it builds MultiWorkerMirroredStrategy from TF_CONFIG; alone, the default strategy.
"""

import os
import time

import tensorflow as tf

strategy = (
    tf.distribute.MultiWorkerMirroredStrategy() if "TF_CONFIG" in os.environ else tf.distribute.get_strategy()
)
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.Input((8,)), tf.keras.layers.Dense(1)])
    optimizer = tf.keras.optimizers.SGD(0.01)


@tf.function
def step(x: tf.Tensor) -> tf.Tensor:
    def replica(x: tf.Tensor) -> tf.Tensor:
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(model(x) ** 2)
        optimizer.apply_gradients(
            zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables, strict=False)
        )
        return loss

    return strategy.run(replica, args=(x,))


step(tf.ones((4, 8)))
print(f"FIRST_STEP {time.time():.6f}", flush=True)
