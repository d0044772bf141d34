"""Scripts launched as several workers that never become one job (or do). usage: never_joins.py KIND

KIND: mirrored | one_device | single_resolver (MWMS on a one-worker resolver) | no_strategy (model.fit
with none) | mwms (joins). Each builds its strategy, then trains a tiny model for a few seconds.
"""

import sys

import keras
import numpy as np
import tensorflow as tf

kind = sys.argv[1]
if kind == "mirrored":
    strategy = tf.distribute.MirroredStrategy()
elif kind == "one_device":
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
elif kind == "single_resolver":
    resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
        tf.train.ClusterSpec({}), task_type="worker", task_id=0
    )
    strategy = tf.distribute.MultiWorkerMirroredStrategy(cluster_resolver=resolver)
elif kind == "mwms":
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
else:
    strategy = tf.distribute.get_strategy()
with strategy.scope():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
x = np.ones((64, 4), "float32")
for _ in range(3):
    model.fit(x, x[:, :1], batch_size=16, epochs=1, verbose=0, shuffle=False)
print("trained", type(strategy).__name__, flush=True)
