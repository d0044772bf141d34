"""Horovod's documented semantics of each collective, checked against NumPy on every rank.

Run on N ranks (tfdist launch --backend mpi -n N, or mpiexec -n N python this.py OUT). Each rank's inputs
are a known function of its rank, so every rank can compute the expected results of all ranks itself.
Writes OUT/checks-<rank>.json: {check name: max abs error or a message}.
"""

import json
import sys
from pathlib import Path

import numpy as np
import tensorflow as tf

import tfdist.horovod.tensorflow as hvd

hvd.init()
rank, size = hvd.rank(), hvd.size()
results = {}


def x_of(r, shape=(2, 3), dtype=np.float32):
    return ((r + 1) * np.arange(np.prod(shape)).reshape(shape) + r).astype(dtype)


def record(name, got, expected, exact=False):
    got, expected = np.asarray(got), np.asarray(expected)
    if got.shape != expected.shape:
        results[name] = f"shape {got.shape} != {expected.shape}"
        return
    err = float(np.max(np.abs(got.astype(np.float64) - expected.astype(np.float64)))) if got.size else 0.0
    results[name] = err if not exact or err == 0 else f"not exact: {err}"


everyone = [x_of(r) for r in range(size)]
record("average (default op)", hvd.allreduce(tf.constant(x_of(rank))), np.mean(everyone, axis=0))
record("sum", hvd.allreduce(tf.constant(x_of(rank)), op=hvd.Sum), np.sum(everyone, axis=0))
record(
    "average=False is a sum", hvd.allreduce(tf.constant(x_of(rank)), average=False), np.sum(everyone, axis=0)
)
record(
    "sum with prescale 0.5, postscale 3",
    hvd.allreduce(tf.constant(x_of(rank)), op=hvd.Sum, prescale_factor=0.5, postscale_factor=3.0),
    np.sum([x * 0.5 for x in everyone], axis=0) * 3.0,
)
record(
    "average with prescale 2",
    hvd.allreduce(tf.constant(x_of(rank)), op=hvd.Average, prescale_factor=2.0),
    np.mean([x * 2.0 for x in everyone], axis=0),
)
record(
    "int32 sum",
    hvd.allreduce(tf.constant(x_of(rank, dtype=np.int32)), op=hvd.Sum),
    np.sum([x_of(r, dtype=np.int32) for r in range(size)], axis=0),
    exact=True,
)
record(
    "float64 average",
    hvd.allreduce(tf.constant(x_of(rank, dtype=np.float64))),
    np.mean([x_of(r, dtype=np.float64) for r in range(size)], axis=0),
)
record("min", hvd.allreduce(tf.constant(-x_of(rank)), op=hvd.Min), np.min([-x for x in everyone], axis=0))
record("max", hvd.allreduce(tf.constant(x_of(rank)), op=hvd.Max), np.max(everyone, axis=0))
record(
    "product",
    hvd.allreduce(tf.constant(x_of(rank) + 1), op=hvd.Product),
    np.prod([x + 1 for x in everyone], axis=0),
)
record(
    "variable input",
    hvd.allreduce(tf.Variable(x_of(rank)), op=hvd.Sum),
    np.sum(everyone, axis=0),
)


@tf.function
def in_graph(x):
    return hvd.allreduce(x, op=hvd.Sum) + hvd.allreduce(2 * x)


record(
    "inside tf.function",
    in_graph(tf.constant(x_of(rank))),
    np.sum(everyone, axis=0) + np.mean([2 * x for x in everyone], axis=0),
)

# IndexedSlices: Horovod allgathers values and indices; an average divides the values by the size.
slices = tf.IndexedSlices(
    tf.constant(x_of(rank)), tf.constant([rank, rank + 10]), dense_shape=tf.constant([20, 3])
)
reduced = hvd.allreduce(slices)
record("indexed slices: values", reduced.values, np.concatenate(everyone, axis=0) / size)
record(
    "indexed slices: indices", reduced.indices, np.concatenate([[r, r + 10] for r in range(size)]), exact=True
)

grouped = hvd.grouped_allreduce(
    [tf.constant(x_of(rank)), tf.constant(x_of(rank, (4,))), tf.constant(x_of(rank, (1,)))], op=hvd.Sum
)
record("grouped sum [0]", grouped[0], np.sum(everyone, axis=0))
record("grouped sum [1]", grouped[1], np.sum([x_of(r, (4,)) for r in range(size)], axis=0))
record("grouped sum [2]", grouped[2], np.sum([x_of(r, (1,)) for r in range(size)], axis=0))

fp16 = hvd.allreduce(tf.constant(x_of(rank)), compression=hvd.Compression.fp16)
results["fp16 compression keeps the dtype"] = 0.0 if fp16.dtype == tf.float32 else f"dtype {fp16.dtype}"
record("fp16 compression value", fp16, np.mean(everyone, axis=0))  # small integers: exact in float16

# allgather: uneven first dimensions, concatenated in rank order.
mine = np.full((rank + 1, 2), rank, np.float32)
record(
    "allgather uneven",
    hvd.allgather(tf.constant(mine)),
    np.concatenate([np.full((r + 1, 2), r, np.float32) for r in range(size)]),
)


@tf.function(input_signature=[tf.TensorSpec([None, 2], tf.float32)])
def gather_in_graph(x):
    return hvd.allgather(x)


record(
    "allgather in tf.function",
    gather_in_graph(tf.constant(mine)),
    np.concatenate([np.full((r + 1, 2), r, np.float32) for r in range(size)]),
)

root = size - 1  # a non-zero root
record("broadcast from the last rank", hvd.broadcast(tf.constant(x_of(rank)), root_rank=root), x_of(root))
variables = [tf.Variable(x_of(rank)), tf.Variable(x_of(rank, (5,), np.int64))]
hvd.broadcast_variables(variables, root_rank=root)
record("broadcast_variables float", variables[0].numpy(), x_of(root))
record("broadcast_variables int64", variables[1].numpy(), x_of(root, (5,), np.int64), exact=True)

# alltoall: rank r sends (d + 1) rows to rank d; receives (r + 1) rows from every rank.
rows = [np.full((d + 1, 2), 10 * rank + d, np.float32) for d in range(size)]
out, received = hvd.alltoall(tf.constant(np.concatenate(rows)), splits=[d + 1 for d in range(size)])
record(
    "alltoall rows",
    out,
    np.concatenate([np.full((rank + 1, 2), 10 * s + rank, np.float32) for s in range(size)]),
)
record("alltoall received splits", received, [rank + 1] * size, exact=True)

results["broadcast_object"] = (
    0.0 if hvd.broadcast_object({"r": rank}, root_rank=root) == {"r": root} else "wrong"
)
results["allgather_object"] = 0.0 if hvd.allgather_object(rank) == list(range(size)) else "wrong"
results["ranks"] = [rank, size, hvd.local_rank(), hvd.local_size(), hvd.cross_rank(), hvd.cross_size()]

Path(sys.argv[1]).mkdir(parents=True, exist_ok=True)
(Path(sys.argv[1]) / f"checks-{rank}.json").write_text(json.dumps(results, indent=1))
