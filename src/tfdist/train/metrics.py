"""Metrics as per-example statistics summed over the global batch.

Every metric is a sum of per-example values divided by the number of examples, so one packed all-reduce
of sums gives every worker the exact global value (Keras metric objects under multi-worker strategies
would each need their own collectives at read time).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tfdist.errors import ConfigError

StatFn = Callable[[Any, Any], Any]


def _accuracy_for(loss_name: str) -> str:
    if "sparse" in loss_name:
        return "sparse_categorical_accuracy"
    if "binary" in loss_name:
        return "binary_accuracy"
    return "categorical_accuracy"


def per_example_stat(name: str) -> StatFn:
    """A function ``(y_true, y_pred) -> per-example values`` for a supported metric name."""
    import tensorflow as tf

    def sparse_acc(y: Any, p: Any) -> Any:
        y = tf.reshape(tf.cast(y, tf.int64), [-1])
        return tf.cast(tf.equal(tf.argmax(p, axis=-1), y), tf.float32)

    def cat_acc(y: Any, p: Any) -> Any:
        return tf.cast(tf.equal(tf.argmax(p, axis=-1), tf.argmax(y, axis=-1)), tf.float32)

    def bin_acc(y: Any, p: Any) -> Any:
        hit = tf.equal(tf.cast(p > 0.5, tf.float32), tf.cast(y, tf.float32))
        return tf.reduce_mean(tf.reshape(tf.cast(hit, tf.float32), [tf.shape(p)[0], -1]), axis=-1)

    def mae(y: Any, p: Any) -> Any:
        diff = tf.abs(tf.cast(y, p.dtype) - p)
        return tf.reduce_mean(tf.reshape(diff, [tf.shape(p)[0], -1]), axis=-1)

    def mse(y: Any, p: Any) -> Any:
        diff = tf.square(tf.cast(y, p.dtype) - p)
        return tf.reduce_mean(tf.reshape(diff, [tf.shape(p)[0], -1]), axis=-1)

    table: dict[str, StatFn] = {
        "sparse_categorical_accuracy": sparse_acc,
        "categorical_accuracy": cat_acc,
        "binary_accuracy": bin_acc,
        "mae": mae,
        "mean_absolute_error": mae,
        "mse": mse,
        "mean_squared_error": mse,
    }
    return table[name]


SUPPORTED = (
    "accuracy",
    "acc",
    "sparse_categorical_accuracy",
    "categorical_accuracy",
    "binary_accuracy",
    "mae",
    "mean_absolute_error",
    "mse",
    "mean_squared_error",
)


def resolve_metrics(metrics: list[Any] | None, loss_name: str) -> list[tuple[str, str]]:
    """Map compile()'s metric list to ``(display name, stat name)`` pairs; unsupported ones are a ConfigError."""
    out: list[tuple[str, str]] = []
    for metric in metrics or []:
        name = metric if isinstance(metric, str) else getattr(metric, "name", repr(metric))
        if name not in SUPPORTED:
            raise ConfigError(
                f"metric {name!r} from model.compile is not supported by tfdist.fit; supported: {', '.join(SUPPORTED)}."
            )
        stat = _accuracy_for(loss_name) if name in ("accuracy", "acc") else name
        out.append(("accuracy" if name in ("accuracy", "acc") else name, stat))
    return out
