"""Ranks that stop meeting on the MPI backend, and Horovod's join. Run on 2 ranks:

    tfdist launch --backend mpi -n 2 --cpu collective_timeout.py MODE OUT

MODE:
- ``sync``: the MPI synchroniser alone (no TensorFlow), at "step 7": rank 0 enters a barrier, rank 1
  skipped it and waits in the next collective, an allgather. The job must end with one line (exit code
  non-zero).
- ``hvd-uneven``: a Horovod loop, rank 0 with 3 batches, rank 1 with 5, and no ``hvd.join()``.
- ``fit-sleep``: ``tfdist.fit`` where rank 1's callback sleeps for a minute at the end of an epoch.
- ``join``: the Horovod loop with uneven batches and ``hvd.join()``, then the variables broadcast from
  the rank that joined last; writes OUT/join-<rank>.npz (the weights at the join and at the end) and
  OUT/join-<rank>.json (join's result, an Average and an allgather while rank 0 is joined, a sum after).

The failing modes write OUT/stuck-<rank>.txt (the time.time() at which that rank entered the collective
that never completes, or started its sleep) for the test's time bound.
"""

import json
import sys
import time
from pathlib import Path

import numpy as np

MODE, OUT = sys.argv[1], Path(sys.argv[2])
BATCHES = {0: 3, 1: 5}  # per rank: uneven
LR = 0.1


def stamp(rank: int) -> None:
    (OUT / f"stuck-{rank}.txt").write_text(repr(time.time()))


def batch(rank: int, index: int) -> tuple[np.ndarray, np.ndarray]:
    """Rank ``rank``'s batch ``index`` of a linear regression (the test computes the same)."""
    x = np.random.default_rng(100 * rank + index).normal(size=(8, 4)).astype("float32")
    return x, x.sum(axis=1, keepdims=True).astype("float32")


if MODE == "sync":
    from tfdist.sync import process_sync
    from tfdist.sync.watch import set_step

    sync = process_sync("mpi")
    sync.barrier()  # every rank
    set_step(7)  # as the training loop does before each step
    if sync.rank == 0:
        stamp(0)
        sync.barrier()
    sync.allgather(np.array([sync.rank], np.float32))
    print("unreachable: the collectives completed", flush=True)
    sys.exit(0)

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

if MODE == "fit-sleep":
    import tfdist

    strategy = tfdist.strategy()

    class SleepOnRank1(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            stamp(1)
            time.sleep(60)

    x = np.random.default_rng(0).normal(size=(128, 4)).astype("float32")
    with strategy.scope():
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
        model.compile(optimizer="sgd", loss="mse")
    callbacks = [SleepOnRank1()] if tfdist.rank() == 1 else []
    tfdist.fit(model, (x, x.sum(axis=1)), batch_size=32, epochs=3, verbose=0, callbacks=callbacks)
    print("unreachable: fit returned", flush=True)
    sys.exit(0)

import tfdist.horovod.tensorflow as hvd  # noqa: E402

hvd.init()
rank = hvd.rank()
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
model.set_weights([np.linspace(-0.3, 0.3, 4, dtype="float32").reshape(4, 1), np.zeros(1, "float32")])
optimizer = keras.optimizers.SGD(LR)


@tf.function
def train_step(x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x) - y))
    tape = hvd.DistributedGradientTape(tape)
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))


local = [batch(rank, i) for i in range(BATCHES[rank])]
dataset = tf.data.Dataset.from_tensor_slices(tuple(np.stack(part) for part in zip(*local, strict=True)))
for number, (x, y) in enumerate(dataset):
    if MODE == "hvd-uneven" and rank == 1 and number == BATCHES[0]:
        stamp(1)  # rank 0 has no batch left: it leaves the loop and ends its script
    train_step(x, y)

if MODE == "hvd-uneven":
    print(f"rank {rank}: done, without hvd.join()", flush=True)
    sys.exit(0)

checks = {}
if rank == 1:  # rank 0 has joined by now or will: an Average divides by every rank, Horovod's rule
    checks["average"] = float(hvd.allreduce(tf.constant([4.0]), name="average")[0])
    try:
        hvd.allgather(tf.constant([1.0]), name="gathered")
        checks["allgather"] = "returned"
    except tf.errors.FailedPreconditionError as exc:
        checks["allgather"] = exc.message
checks["last"] = int(hvd.join())
at_join = model.get_weights()  # a joined rank applied no update after its last batch
# As Horovod's docs advise: the rank that joined last holds the model every rank should go on with.
hvd.broadcast_variables(model.variables, root_rank=checks["last"])
checks["after"] = float(hvd.allreduce(tf.constant([rank + 1.0]), name="after", op=hvd.Sum)[0])
final = model.get_weights()
np.savez(
    OUT / f"join-{rank}.npz",
    kernel=final[0],
    bias=final[1],
    kernel_at_join=at_join[0],
    bias_at_join=at_join[1],
)
(OUT / f"join-{rank}.json").write_text(json.dumps(checks))
