"""Build tfdist.strategy() and all-reduce (rank * 10 + replica id + 1) across every replica; print JSON."""

import json
import sys

import tfdist

if len(sys.argv) > 1 and sys.argv[1] == "--op-first":
    import tensorflow as tf

    tf.constant(1.0) + 1.0  # runs an op before the strategy exists: tfdist must refuse with a clear error

try:
    strategy = tfdist.strategy()
except tfdist.ConfigError as exc:
    print(json.dumps({"error": str(exc)}))
    sys.exit(2)

import tensorflow as tf


@tf.function
def step() -> tf.Tensor:
    ctx = tf.distribute.get_replica_context()
    value = tf.cast(tfdist.rank() * 10 + ctx.replica_id_in_sync_group + 1, tf.float32)
    return ctx.all_reduce(tf.distribute.ReduceOp.SUM, value)


results = strategy.experimental_local_results(strategy.run(step))
print(
    json.dumps(
        {
            # MultiWorkerMirroredStrategy's class is named CollectiveAllReduceStrategy in TF 2.x.
            "kind": "MultiWorkerMirroredStrategy"
            if isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy)
            else type(strategy).__name__,
            "replicas": strategy.num_replicas_in_sync,
            "sums": [float(r.numpy()) for r in results],
            "rank": tfdist.rank(),
        }
    )
)
