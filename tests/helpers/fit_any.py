"""tfdist.fit with what model.fit takes: a dynamically batched tf.data pipeline with sample weights, a model
that is not built yet, string, object and custom metrics and weighted_metrics. Writes OUT/rank-R.*.

usage: fit_any.py OUT [--keras]   (--keras: Keras' own model.fit instead, as the reference)
"""

import json
import os
import sys

import numpy as np

import tfdist

strategy = tfdist.strategy()
import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

out = sys.argv[1]
GLOBAL_BATCH = 48


class MeanMargin(keras.metrics.Metric):
    """A user's own metric: mean gap between the two largest logits."""

    def __init__(self, name="margin", **kwargs):
        super().__init__(name=name, **kwargs)
        self.total = self.add_variable(shape=(), initializer="zeros", name="total")
        self.count = self.add_variable(shape=(), initializer="zeros", name="count")

    def update_state(self, y_true, y_pred, sample_weight=None):
        top = tf.math.top_k(y_pred, k=2).values
        self.total.assign_add(tf.reduce_sum(top[:, 0] - top[:, 1]))
        self.count.assign_add(tf.cast(tf.shape(y_pred)[0], "float32"))

    def result(self):
        return self.total / self.count


rng = np.random.default_rng(0)
x = rng.normal(size=(384, 8)).astype("float32")
w_true = rng.normal(size=(8, 3)).astype("float32")
y = np.argmax(x @ w_true, axis=1).astype("int32")
sw = rng.uniform(0.5, 1.5, size=384).astype("float32")
train = tf.data.Dataset.from_tensor_slices((x, y, sw)).batch(GLOBAL_BATCH)  # batch dimension: None
val = tf.data.Dataset.from_tensor_slices((x[:96], y[:96])).batch(GLOBAL_BATCH)

keras.utils.set_random_seed(3)
with strategy.scope():
    model = keras.Sequential([keras.layers.Dense(16, activation="relu"), keras.layers.Dense(3)])  # unbuilt
    model.compile(
        optimizer=keras.optimizers.SGD(0.1),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy", keras.metrics.SparseTopKCategoricalAccuracy(k=2, name="top2"), MeanMargin()],
        weighted_metrics=["accuracy"],
    )

if "--keras" in sys.argv:
    history = model.fit(train, epochs=3, validation_data=val, verbose=0)
else:
    history = tfdist.fit(model, train, epochs=3, validation_data=val, verbose=0)
holdout = tf.data.Dataset.from_tensor_slices((x[:100], y[:100], sw[:100])).batch(GLOBAL_BATCH)  # 48+48+4
inputs = tf.data.Dataset.from_tensor_slices(x[:100]).batch(GLOBAL_BATCH)
if "--keras" in sys.argv:
    evaluation = model.evaluate(holdout, return_dict=True, verbose=0)
    predictions = model.predict(inputs, verbose=0)
else:
    evaluation = tfdist.evaluate(model, holdout, return_dict=True)
    predictions = tfdist.predict(model, inputs)
rank = max(tfdist.rank(), 0)
np.save(os.path.join(out, f"rank-{rank}.predictions.npy"), predictions)
np.save(
    os.path.join(out, f"rank-{rank}.weights.npy"), np.concatenate([v.ravel() for v in model.get_weights()])
)
result = {"history": history.history, "evaluate": evaluation}
if tfdist.world_size() == 1:  # Keras' own evaluation of the final weights, for the metric values
    result["keras_evaluate"] = model.evaluate(val, return_dict=True, verbose=0)
with open(os.path.join(out, f"rank-{rank}.json"), "w") as f:
    json.dump(result, f)
