"""``class_weight`` as Keras applies it: each example's sample weight times its class's weight, read from
the label with Keras' rule, checked before a run starts (a class the data cannot hold is a typo)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from tfdist.errors import ConfigError


def label_classes(y: np.ndarray) -> np.ndarray:
    """The class of each label, as Keras reads it: argmax of one-hot rows, else the rounded value."""
    y = np.asarray(y)
    if y.ndim >= 2 and y.shape[-1] > 1:
        return np.argmax(y, axis=-1).reshape(-1)
    return np.round(y.reshape(len(y), -1)[:, 0]).astype(np.int64) if len(y) else np.zeros(0, np.int64)


def class_weight_table(
    class_weight: Any, output_classes: int | None, labels: np.ndarray | None = None
) -> np.ndarray:
    """The float32 weight of each class id ``0..K-1`` (1.0 for classes not named), checked.

    ``output_classes``: classes the model's output can name (its last dimension; 2 for one sigmoid unit),
    None when unknown. ``labels``: the training labels when they are in memory (NumPy inputs).
    Input/Output: ``({0: 1.0, 2: 3.0}, 3)`` -> ``[1.0, 1.0, 3.0]``.
    """
    if not isinstance(class_weight, Mapping) or not class_weight:
        raise ConfigError(
            f"class_weight={class_weight!r} must be a non-empty dict of class id -> weight, e.g. "
            "{0: 1.0, 1: 5.0}."
        )
    weights: dict[int, float] = {}
    for key, value in class_weight.items():
        if isinstance(key, bool) or not isinstance(key, int | np.integer) or key < 0:
            raise ConfigError(f"class_weight key {key!r} is not a class id (a non-negative integer).")
        try:
            weight = float(value)
        except (TypeError, ValueError):
            raise ConfigError(f"class_weight[{key}]={value!r} is not a number.") from None
        if not np.isfinite(weight) or weight < 0:
            raise ConfigError(f"class_weight[{key}]={value!r} must be a finite number >= 0.")
        weights[int(key)] = weight
    if output_classes is not None:
        outside = sorted(k for k in weights if k >= output_classes)
        if outside:
            raise ConfigError(
                f"class_weight names class(es) {outside} but the model's output has {output_classes} "
                f"class(es) (0..{output_classes - 1}). Hint: check the class ids."
            )
    if labels is not None:
        present = set(np.unique(label_classes(labels)).tolist())
        absent = sorted(k for k in weights if k not in present)
        if absent:
            raise ConfigError(
                f"class_weight names class(es) {absent} that no training label has (labels hold "
                f"{sorted(present)[:20]}). Hint: check the class ids."
            )
    size = max(max(weights) + 1, output_classes or 0)
    if labels is not None and len(labels):
        size = max(size, int(label_classes(labels).max()) + 1)
    return np.array([weights.get(c, 1.0) for c in range(size)], np.float32)


def output_classes(model: Any) -> int | None:
    """Classes the model's (single) output names: its last dimension, 2 for one unit; None if unknown."""
    shape = getattr(model, "output_shape", None)
    if not isinstance(shape, tuple) or not shape or not isinstance(shape[-1], int):
        return None
    return 2 if shape[-1] == 1 else int(shape[-1])


def class_weights_of(table: Any, y: Any) -> Any:
    """Graph op: the class weight of each label in ``y`` (Keras' reading of a label's class)."""
    import tensorflow as tf

    if isinstance(y, dict | list | tuple):
        raise ConfigError("class_weight is only supported for models with a single output (as in Keras).")
    if y.shape.rank is not None and y.shape.rank >= 2 and y.shape[-1] is not None and y.shape[-1] > 1:
        classes = tf.argmax(y, axis=-1, output_type=tf.int32)
    else:
        classes = tf.cast(tf.round(tf.reshape(tf.cast(y, tf.float32), [tf.shape(y)[0], -1])[:, 0]), tf.int32)
    return tf.gather(tf.constant(table), tf.reshape(classes, [-1]))
