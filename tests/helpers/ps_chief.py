"""Chief of a parameter-server job: tfdist.strategy() builds ParameterServerStrategy; schedule steps."""

import json
import os
import sys

import tfdist

strategy = tfdist.strategy()
import tensorflow as tf  # noqa: E402

coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(strategy)
with strategy.scope():
    counter = tf.Variable(0.0)
    weight = tf.Variable(5.0)


@tf.function
def step() -> tf.Tensor:
    def fn() -> tf.Tensor:
        weight.assign_sub(0.1 * 2.0 * weight)  # gradient step on weight**2
        counter.assign_add(1.0)
        return weight

    return strategy.run(fn)


for _ in range(20):
    coordinator.schedule(step)
coordinator.join()
result = {
    "kind": type(strategy).__name__,
    "steps": float(counter.numpy()),
    "weight": float(weight.numpy()),
    "workers": len(json.loads(os.environ["TF_CONFIG"])["cluster"]["worker"]),
}
with open(os.path.join(sys.argv[1], "ps-result.json"), "w") as fh:
    json.dump(result, fh)
print("chief done", result, flush=True)
