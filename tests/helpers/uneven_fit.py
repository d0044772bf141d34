"""Each worker with data of its own, in unequal amounts: tfdist.fit / evaluate / predict must equal ONE
process trained on the global batches those data make (global batch k = worker 0's k-th batch, then
worker 1's...).

usage: uneven_fit.py OUT WORKERS [--reference] [--only NAME,...]
Without --reference, run as WORKERS workers (tfdist launch -n WORKERS): each rank trains on its own data.
With --reference, one process builds every rank's data, the global batches from them, and trains Keras'
own model.fit on those. Writes OUT/NAME.rank-R.json and OUT/NAME.rank-R.weights.npy per scenario.
"""

import json
import sys

import numpy as np

import tfdist

strategy = tfdist.strategy()
import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

OUT, WORKERS = sys.argv[1], int(sys.argv[2])
REFERENCE = "--reference" in sys.argv
ONLY = sys.argv[sys.argv.index("--only") + 1].split(",") if "--only" in sys.argv else None
RANK = 0 if REFERENCE else max(tfdist.rank(), 0)
GLOBAL = 24 * WORKERS  # each worker gives 24 rows a step
W_TRUE = np.random.default_rng(99).normal(size=(6, 3))

# Examples per rank, by scenario (3 workers use the first three): one batch more, a partial batch, an
# empty worker, one worker with most of the data.
SIZES = {
    "arrays_one_batch_more": (96, 120, 72),
    "arrays_partial": (100, 37, 50),
    "arrays_steps_given": (100, 37, 50),  # steps_per_epoch=6: each worker's data cycles
    "dataset_cardinality": (120, 72, 30),
    "dataset_shard_off": (72, 72, 72),  # the same lengths, other rows: auto-shard OFF says they are own
    "dataset_empty_worker": (80, 0, 40),
    "dataset_unknown_length": (50, 120, 72),  # a filter: no worker knows its length before reading it
}
STEPS = {"arrays_steps_given": 6}


def local_data(rank: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1000 + rank)
    x = rng.normal(size=(n, 6)).astype("float32")
    return x, np.argmax(x @ W_TRUE, axis=1).astype("int32")


def worker_batches(name: str, rank: int, n: int, cycled: bool = True) -> list:
    """This rank's batches of one epoch, as the worker contributes them (cycled when steps are given)."""
    x, y = local_data(rank, n)
    per = GLOBAL // WORKERS
    out = [(x[i : i + per], y[i : i + per]) for i in range(0, n, per)]
    if name in STEPS and cycled:
        out = [out[k % len(out)] for k in range(STEPS[name])]
    return out


def global_batches(name: str, cycled: bool = True) -> list:
    """The reference's global batches: every rank's k-th batch, in rank order, missing ones left out."""
    per_rank = [worker_batches(name, r, SIZES[name][r], cycled) for r in range(WORKERS)]
    steps = max(len(b) for b in per_rank)
    out = []
    for k in range(steps):
        parts = [b[k] for b in per_rank if k < len(b)]
        out.append((np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])))
    return out


def make_model():
    keras.utils.set_random_seed(5)
    with strategy.scope():
        model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(8, "tanh"), keras.layers.Dense(3)])
        model.compile(
            optimizer=keras.optimizers.Adam(0.02),  # momentum: an extra all-zero step would show
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            metrics=["accuracy"],
        )
    return model


def reference(name: str) -> dict:
    batches = global_batches(name)
    spec = (tf.TensorSpec([None, 6], tf.float32), tf.TensorSpec([None], tf.int32))
    ds = tf.data.Dataset.from_generator(lambda: iter(batches), output_signature=spec)
    # Declared: with an unknown length Keras counts one step more per epoch (the one that finds the end).
    ds = ds.apply(tf.data.experimental.assert_cardinality(len(batches)))
    model = make_model()
    history = model.fit(ds, epochs=3, verbose=0)
    once = global_batches(name, cycled=False)  # evaluate / predict see each example once
    everything = tuple(np.concatenate([b[i] for b in once]) for i in (0, 1))
    evaluated = model.evaluate(everything[0], everything[1], batch_size=GLOBAL, verbose=0, return_dict=True)
    predicted = model.predict(everything[0], batch_size=GLOBAL, verbose=0)
    return finish(name, model, history.history, evaluated, predicted)


def distributed(name: str) -> dict:
    n = SIZES[name][RANK]
    x, y = local_data(RANK, n)
    options = {"batch_size": GLOBAL, "shuffle": False}
    if name in STEPS:
        options["steps_per_epoch"] = STEPS[name]
    if name.startswith("dataset"):
        options = {"shuffle": False}  # batched by each worker's share of the global batch
        data = tf.data.Dataset.from_tensor_slices((x, y)).batch(GLOBAL // WORKERS)
        if name == "dataset_unknown_length":  # said explicitly: nothing else tells these data are own
            data = data.filter(lambda x, y: True)
            options["per_worker_data"] = True
        if name == "dataset_shard_off":
            opts = tf.data.Options()
            opts.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
            data = data.with_options(opts)
    else:
        data = (x, y)
    model = make_model()
    history = tfdist.fit(model, data, epochs=3, verbose=0, **options)
    if name in STEPS:  # evaluate / predict each worker's data once, not cycled
        data = (x, y)
    own = {"per_worker_data": True} if "per_worker_data" in options else {}
    evaluated = tfdist.evaluate(model, data, batch_size=GLOBAL, return_dict=True, **own)
    predicted = tfdist.predict(
        model, data if isinstance(data, tf.data.Dataset) else x, batch_size=GLOBAL, **own
    )
    return finish(name, model, history.history, evaluated, predicted)


def finish(name: str, model, history: dict, evaluated: dict, predicted: np.ndarray) -> None:
    np.save(f"{OUT}/{name}.rank-{RANK}.weights.npy", np.concatenate([w.ravel() for w in model.get_weights()]))
    record = {
        "history": {k: [float(v) for v in vs] for k, vs in history.items() if k != "examples_per_sec"},
        "iterations": int(model.optimizer.iterations.numpy()),
        "evaluate": {k: float(v) for k, v in evaluated.items()},
        "predict": np.asarray(predicted).tolist(),
    }
    with open(f"{OUT}/{name}.rank-{RANK}.json", "w") as fh:
        json.dump(record, fh)


for scenario in SIZES:
    if ONLY is None or scenario in ONLY:
        (reference if REFERENCE else distributed)(scenario)
