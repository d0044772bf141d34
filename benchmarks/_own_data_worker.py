"""One worker of benchmarks/own_data.py: tfdist.fit on mnist-cnn (synthetic data) with the job's data (the
same arrays on every worker), each worker's own arrays (per_worker_data: one more all-reduce of a number
per step), or each worker's own dataset of unknown length (its first epoch agrees after every step whether
data remain). Writes examples/s of each epoch as JSON (chief).

usage (through tfdist launch): _own_data_worker.py MODE STEPS OUT_JSON
MODE: job | own | own-dataset | own-unknown
"""

from __future__ import annotations

import json
import sys

import keras
import tensorflow as tf

import tfdist
from tfdist.workloads import datasets, models

mode, steps, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
strategy = tfdist.strategy()
workers = max(tfdist.world_size(), 1)
GLOBAL = 64 * tfdist.num_replicas(strategy)
data = datasets.synthetic((28, 28, 1), 10, GLOBAL * steps)
x, y = data.x_train, data.y_train
options: dict = {"batch_size": GLOBAL, "shuffle": False}
if mode == "job":
    train = (x, y)
else:
    share = len(x) // workers  # each worker's own rows: as many steps as the job's data
    rank = max(tfdist.rank(), 0)
    x, y = x[rank * share : (rank + 1) * share], y[rank * share : (rank + 1) * share]
    train = (x, y)
    options["per_worker_data"] = True
    if mode.startswith("own-"):
        ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(GLOBAL // workers)
        if mode == "own-unknown":
            ds = ds.filter(lambda a, b: True)
        train, options = ds, {"per_worker_data": True, "shuffle": False}

keras.utils.set_random_seed(0)
with strategy.scope():
    model = models.build("mnist-cnn", (28, 28, 1), 10)
    model.compile(optimizer=keras.optimizers.SGD(0.01), loss="sparse_categorical_crossentropy")
history = tfdist.fit(model, train, epochs=3, verbose=0, **options)
if tfdist.is_chief():
    with open(out, "w") as f:
        json.dump({"examples_per_sec": history.history["examples_per_sec"]}, f)
