"""Horovod's name matching, gradients, reducescatter and mismatch errors, checked on every rank.

Run on 2 ranks (tfdist launch --backend mpi -n 2 hvd_matching.py OUT). Each rank's inputs are a known
function of its rank, so every rank computes every expected value itself. Writes OUT/checks-<rank>.json:
{check name: max abs error, or a message}.
"""

import json
import sys
import time
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

import tfdist.horovod.tensorflow as hvd
import tfdist.horovod.tensorflow.keras as hvd_keras

hvd.init()
rank, size = hvd.rank(), hvd.size()
results = {}


def record(name, got, expected):
    got, expected = np.asarray(got, np.float64), np.asarray(expected, np.float64)
    if got.shape != expected.shape:
        results[name] = f"shape {got.shape} != {expected.shape}"
    else:
        results[name] = float(np.max(np.abs(got - expected))) if got.size else 0.0


def x_of(r, n=6):
    return (np.arange(n, dtype=np.float32) + 1) * (r + 1)


# Two independent collectives issued in opposite orders on the ranks: matched by name, not by order.
@tf.function
def opposite(a, b):
    if rank % 2 == 0:
        first = hvd.allreduce(a, op=hvd.Sum, name="a")
        second = hvd.allgather(b, name="b")
    else:
        second = hvd.allgather(b, name="b")
        first = hvd.allreduce(a, op=hvd.Sum, name="a")
    return first, second


for _ in range(3):  # the same names every step: step k pairs with step k
    first, second = opposite(tf.constant(x_of(rank, 17)), tf.constant(x_of(rank, 3)[: rank + 1]))
record("opposite orders: allreduce", first, np.sum([x_of(r, 17) for r in range(size)], axis=0))
record("opposite orders: allgather", second, np.concatenate([x_of(r, 3)[: r + 1] for r in range(size)]))


@tf.function
def unnamed(a, b):  # Horovod's names from the tensors' names, whatever order the ranks trace them in
    if rank % 2 == 0:
        return hvd.allreduce(a, op=hvd.Sum), hvd.allreduce(b, op=hvd.Sum)
    second = hvd.allreduce(b, op=hvd.Sum)
    return hvd.allreduce(a, op=hvd.Sum), second


one, two = unnamed(tf.constant(x_of(rank)), tf.constant(x_of(rank, 4) * 10))
record("opposite orders, derived names: a", one, np.sum([x_of(r) for r in range(size)], axis=0))
record("opposite orders, derived names: b", two, np.sum([x_of(r, 4) * 10 for r in range(size)], axis=0))


def gradient(fn, x, upstream):
    x = tf.Variable(x)
    with tf.GradientTape() as tape:
        y = fn(x * 1.0)
    return tape.gradient(y, x, output_gradients=tf.constant(upstream))


# Gradients, as Horovod defines them; the upstream gradient of rank r is (r + 1) * ones.
ups = [float(r + 1) for r in range(size)]
mean_up = np.mean(ups)
g = gradient(
    lambda v: hvd.allreduce(v, op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.5),
    x_of(rank),
    np.full(6, ups[rank], np.float32),
)
record("grad allreduce sum (scaled)", g, np.full(6, sum(ups) * 2.0 * 0.5))
g = gradient(lambda v: hvd.allreduce(v, op=hvd.Average), x_of(rank), np.full(6, ups[rank], np.float32))
record("grad allreduce average", g, np.full(6, mean_up))
g = gradient(
    lambda v: hvd.grouped_allreduce([v, 2 * v], op=hvd.Sum)[1], x_of(rank), np.full(6, ups[rank], np.float32)
)
record("grad grouped allreduce", g, np.full(6, 2 * sum(ups)))
rows = [r + 1 for r in range(size)]
upstream = np.concatenate([np.full(n, 10.0 * (i + 1), np.float32) for i, n in enumerate(rows)]) * (rank + 1)
g = gradient(hvd.allgather, x_of(rank, rows[rank]), upstream)
average_up = np.concatenate([np.full(n, 10.0 * (i + 1)) for i, n in enumerate(rows)]) * mean_up
record(
    "grad allgather: this rank's rows of the average", g, average_up[sum(rows[:rank]) : sum(rows[: rank + 1])]
)
g = gradient(lambda v: hvd.broadcast(v, root_rank=1), x_of(rank), np.full(6, ups[rank], np.float32))
record("grad broadcast: average on the root, 0 elsewhere", g, np.full(6, mean_up if rank == 1 else 0.0))
splits = [1 + d for d in range(size)]  # rank r sends d + 1 rows to rank d
send = np.arange(sum(splits), dtype=np.float32) + 100 * rank
g = gradient(
    lambda v: hvd.alltoall(v, splits=splits)[0], send, np.arange((rank + 1) * size, dtype=np.float32) + 1
)
# The reverse exchange: the rows this rank sent to d come back as d's upstream gradient of them.
expected = np.concatenate(
    [
        (np.arange((d + 1) * size, dtype=np.float32) + 1)[rank * (d + 1) : (rank + 1) * (d + 1)]
        for d in range(size)
    ]
)
record("grad alltoall: the reverse exchange", g, expected)
g = gradient(
    lambda v: hvd.reducescatter(v, op=hvd.Sum), x_of(rank, 2 * size), np.full(2, ups[rank], np.float32)
)
record("grad reducescatter sum: allgather x size", g, np.concatenate([np.full(2, u * size) for u in ups]))
g = gradient(
    lambda v: hvd.reducescatter(v, op=hvd.Average), x_of(rank, 2 * size), np.full(2, ups[rank], np.float32)
)
record("grad reducescatter average: allgather", g, np.concatenate([np.full(2, u) for u in ups]))
# The grouped forms: each member's gradient is the single form's (here the second member, scaled by 3).
g = gradient(lambda v: hvd.grouped_allgather([v, 3 * v])[1], x_of(rank, rows[rank]), upstream)
record(
    "grad grouped allgather",
    g,
    3 * average_up[sum(rows[:rank]) : sum(rows[: rank + 1])],
)
g = gradient(
    lambda v: hvd.grouped_reducescatter([v, 3 * v], op=hvd.Sum)[1],
    x_of(rank, 2 * size),
    np.full(2, ups[rank], np.float32),
)
record("grad grouped reducescatter sum", g, 3 * np.concatenate([np.full(2, u * size) for u in ups]))

# reducescatter: even and uneven splits, Sum and Average, pre/postscale, grouped.
for n in (4 * size, 4 * size + 1):
    everyone = [x_of(r, n) for r in range(size)]
    counts = [n // size + (1 if r < n % size else 0) for r in range(size)]
    lo = sum(counts[:rank])
    total = np.sum(everyone, axis=0)[lo : lo + counts[rank]]
    kind = "uneven" if n % size else "even"
    record(f"reducescatter {kind} sum", hvd.reducescatter(tf.constant(x_of(rank, n)), op=hvd.Sum), total)
    record(f"reducescatter {kind} average", hvd.reducescatter(tf.constant(x_of(rank, n))), total / size)
    record(
        f"reducescatter {kind} pre/postscale",
        hvd.reducescatter(tf.constant(x_of(rank, n)), op=hvd.Sum, prescale_factor=3.0, postscale_factor=0.25),
        total * 0.75,
    )
    got = hvd.grouped_reducescatter(
        [tf.constant(x_of(rank, n)), tf.constant(x_of(rank, n).astype(np.float64))], op=hvd.Sum
    )
    record(f"grouped reducescatter {kind} [0]", got[0], total)
    record(f"grouped reducescatter {kind} [1] float64", got[1], total)
record(
    "allreduce int32 with postscale",
    hvd.allreduce(tf.constant([10, 20], tf.int32), op=hvd.Sum, postscale_factor=0.5),
    np.array([10, 20]) * size * 0.5,
)


# PartialDistributedGradientTape and Keras' PartialDistributedOptimizer: the local layer's gradient stays
# on its rank (divided by the size when scale_local_gradients), the shared layer's is averaged.
x3 = tf.constant([x_of(rank, 3)])
mean_x = np.mean([x_of(r, 3) for r in range(size)], axis=0).reshape(3, 1)
for scale in (True, False):
    shared, local = keras.layers.Dense(1, use_bias=False), keras.layers.Dense(1, use_bias=False)
    shared.build((None, 3))
    local.build((None, 3))
    with tf.GradientTape() as plain:
        loss = tf.reduce_sum(shared(x3)) + tf.reduce_sum(local(x3))
    tape = hvd.PartialDistributedGradientTape(plain, local_layers=[local], scale_local_gradients=scale)
    g_shared, g_local = tape.gradient(loss, [shared.kernel, local.kernel])
    record(f"partial tape, scale {scale}: shared layer averaged", g_shared, mean_x)
    expected_local = x_of(rank, 3).reshape(3, 1) / (size if scale else 1)
    record(f"partial tape, scale {scale}: local layer kept", g_local, expected_local)
    shared.kernel.assign(tf.ones([3, 1]))
    local.kernel.assign(tf.ones([3, 1]))
    opt = hvd_keras.PartialDistributedOptimizer(
        keras.optimizers.SGD(1.0), local_layers=[local], scale_local_gradients=scale
    )
    own = [tf.constant(x_of(rank, 3).reshape(3, 1))] * 2  # this rank's own gradient for both kernels
    opt.apply_gradients(zip(own, [shared.kernel, local.kernel], strict=True))
    record(f"partial optimizer, scale {scale}: shared layer averaged", shared.kernel, 1 - mean_x)
    record(f"partial optimizer, scale {scale}: local layer kept", local.kernel, 1 - expected_local)


# A shape mismatch: FailedPreconditionError on every rank, promptly, eagerly and inside tf.function.
@tf.function
def mismatched(z):
    return hvd.allreduce(z)


for label, call in (("eager", hvd.allreduce), ("tf.function", mismatched)):
    started = time.monotonic()
    try:
        call(tf.zeros([3, 4 + rank]))
        results[f"mismatch {label}"] = "no error"
    except tf.errors.FailedPreconditionError as exc:
        ok = "Mismatched ALLREDUCE tensor shapes: rank 0 sent float32[3, 4], but rank 1 sent float32[3, 5]"
        results[f"mismatch {label}"] = 0.0 if ok in str(exc) else f"message: {exc}"
        results[f"mismatch {label} seconds"] = time.monotonic() - started
try:
    hvd.broadcast(tf.zeros([2]), root_rank=rank)
    results["mismatched roots"] = "no error"
except tf.errors.FailedPreconditionError as exc:
    results["mismatched roots"] = 0.0 if "Mismatched BROADCAST root ranks" in str(exc) else str(exc)
record("after the errors, collectives still work", hvd.allreduce(tf.ones([2]), op=hvd.Sum), np.full(2, size))

# A TensorFlow 1 graph run by a Session with one inter-op thread, each run fetching every gather so far
# (Horovod's test_horovod_allgather_fused_cpu): a wait must not take the thread before an earlier submit.
with tf.Graph().as_default():
    checks = []
    config = tf.compat.v1.ConfigProto(inter_op_parallelism_threads=1, intra_op_parallelism_threads=1)
    with tf.compat.v1.Session(config=config) as session:
        for dtype in (tf.int32, tf.float16, tf.float32, tf.float64, tf.int64):
            gathered = hvd.allgather(tf.cast(tf.ones([17]) * rank, dtype))
            for r in range(size):
                part = tf.cast(tf.slice(gathered, [r * 17], [17]), tf.int32)
                checks.append(tf.reduce_all(tf.equal(part, r)))
            passed = session.run(tf.reduce_all(checks))
    record("TF1 session, one thread: cumulative gathers", float(not passed), 0.0)

Path(sys.argv[1]).mkdir(parents=True, exist_ok=True)
(Path(sys.argv[1]) / f"checks-{rank}.json").write_text(json.dumps(results, indent=1))
