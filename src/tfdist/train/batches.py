"""What a batch is: the epoch's plan, the ``(x, y, w, s)`` form every batch reaches the step in, and what the
user's data say of their batches. ``w``: the sample weights (0 on padding); ``s``: each row's share of its
GLOBAL batch's loss (``1 / real rows``), so ``sum(loss * w * s)`` is Keras' per-batch mean on any replica.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from tfdist.errors import ConfigError
from tfdist.train.uneven import OwnData


@dataclass(frozen=True)
class BatchPlan:
    """Batch sizes and steps for one epoch (``steps_per_epoch`` 0: not known yet)."""

    global_batch: int
    per_replica: int
    steps_per_epoch: int


def plan_batches(
    global_batch: int, replicas: int, examples: int | None, steps_per_epoch: int | None
) -> BatchPlan:
    """Check divisibility and derive steps per epoch (a partial last batch is one more step).

    Input/Output: ``(64, 2, 1000, None)`` -> ``BatchPlan(64, 32, 16)``.
    """
    if global_batch < 1:
        raise ConfigError(f"batch size {global_batch} must be at least 1.")
    if global_batch % replicas:
        lower = max(replicas, global_batch - global_batch % replicas)
        raise ConfigError(
            f"global batch {global_batch} is not divisible by the {replicas} replicas; use {lower} or "
            f"{lower + replicas}."
        )
    if steps_per_epoch is not None and steps_per_epoch < 1:
        raise ConfigError(f"steps_per_epoch={steps_per_epoch} must be at least 1.")
    if steps_per_epoch is None:
        if examples is None:
            raise ConfigError(
                "the number of batches per epoch is unknown (infinite or unsized dataset). Hint: pass "
                "steps_per_epoch=N; or, when each worker's dataset is its own (its own files), "
                "per_worker_data=True: every worker's data is then one epoch."
            )
        steps_per_epoch = -(-examples // global_batch)
        if steps_per_epoch == 0:
            raise ConfigError("the data holds no example to train on.")
    return BatchPlan(global_batch, global_batch // replicas, steps_per_epoch)


def weighted(rows: int | None = None, class_weights: Any = None) -> Callable[..., Any]:
    """Map function for batched dataset elements -> ``(x, y, w, s)``; ``rows``: the global batch a row's
    loss is shared by (None: this element's rows); ``class_weights`` multiplied into the weights."""
    import tensorflow as tf

    def apply(*parts: Any) -> tuple[Any, Any, Any, Any]:
        element = parts if len(parts) > 1 else parts[0]
        if isinstance(element, dict) or not isinstance(element, tuple) or len(element) not in (2, 3):
            raise ConfigError(
                "dataset elements must be (features, labels) or (features, labels, sample_weights); got "
                f"{type(element).__name__} of {len(element) if isinstance(element, tuple) else 1} part(s)."
            )
        x, y = element[0], element[1]
        n = tf.shape(tf.nest.flatten(x)[0])[:1]
        w = element[2] if len(element) == 3 else tf.ones(n, tf.float32)
        if class_weights is not None:
            from tfdist.train.weights import class_weights_of

            w = tf.cast(w, tf.float32) * class_weights_of(class_weights, y)
        total = tf.cast(n[0] if rows is None else rows, tf.float32)
        return x, y, w, tf.fill(n, 1.0 / total)

    return apply


def own_plan(own: OwnData, replicas: int) -> BatchPlan:
    """The epoch's plan for the workers' own data (``steps_per_epoch`` 0 until the first epoch tells it)."""
    import dataclasses

    plan = plan_batches(own.global_batch, replicas, None, own.steps or 1)
    return dataclasses.replace(plan, steps_per_epoch=own.steps or 0)


def check_arrays(source: Any) -> tuple[np.ndarray, ...]:
    """NumPy ``(x, y)`` as arrays of equal length; anything else is a ConfigError."""
    if len(source) != 2:
        raise ConfigError(
            f"NumPy training data must be a pair (x, y); got {len(source)} arrays. Hint: use a "
            "tf.data.Dataset for sample weights."
        )
    arrays = tuple(np.asarray(a) for a in source)
    lengths = {len(a) for a in arrays}
    if len(lengths) != 1:
        raise ConfigError(f"NumPy arrays x and y have different lengths {sorted(lengths)}.")
    return arrays


def static_batch(dataset: Any) -> int:
    """The global batch size of a batched dataset: declared statically, else read from its first batch."""
    import tensorflow as tf

    spec = tf.nest.flatten(dataset.element_spec)[0]
    if spec.shape.rank == 0:
        raise ConfigError(
            "the dataset is not batched (its elements are single examples). Hint: call "
            ".batch(GLOBAL_BATCH) on it."
        )
    size = spec.shape[0] if spec.shape.rank else None
    if size is not None:
        return int(size)
    for element in dataset.take(1):
        return int(tf.shape(tf.nest.flatten(element)[0])[0])
    raise ConfigError("the dataset is empty: it yields no batch to train on.")


def full_batches(dataset: Any) -> int:
    """Batches of a batched dataset that are full (read from the pipeline's batching step); -1 if unknown.

    Input/Output: ``range(384).batch(48)`` -> 8; ``range(100).batch(48)`` -> 2.
    """
    import tensorflow as tf

    cardinality = int(dataset.cardinality().numpy())
    if cardinality <= 0 or tf.nest.flatten(dataset.element_spec)[0].shape[0] is not None:
        return cardinality
    node = dataset
    for _ in range(100):  # map / prefetch / cache keep the number of batches; follow the first input
        if type(node).__name__ in ("_BatchDataset", "_ParallelBatchDataset"):
            examples = int(node._input_dataset.cardinality().numpy())
            size = int(node._batch_size.numpy())
            if examples >= 0 and -(-examples // size) == cardinality:
                return examples // size
            break
        inputs = node._inputs() if hasattr(node, "_inputs") else []
        if len(inputs) != 1 or int(inputs[0].cardinality().numpy()) != cardinality:
            break
        node = inputs[0]
    return cardinality - 1  # unknown: the last batch may be partial, count only the sure ones


def sample_inputs(source: Any) -> tuple[Any, Any]:
    """A tiny (x, y) batch with the data's structure, shapes and dtypes, to build models and metrics: zeros
    from a dataset's element spec (its first batch when a shape is known only at run time), or two rows."""
    import tensorflow as tf

    def zeros(spec: Any) -> Any:
        if not isinstance(spec, tf.TensorSpec):
            raise ConfigError(f"dataset elements must be dense tensors; got {type(spec).__name__}.")
        if spec.dtype == tf.string:
            raise ConfigError(
                "the dataset yields strings; tfdist.fit trains on numbers. Hint: decode or vectorize in the "
                "pipeline (dataset.map(...)) before batching."
            )
        dims = [1 if d is None else int(d) for d in spec.shape]
        if dims:
            dims[0] = min(dims[0], 2)  # a batch of at most 2 rows: only the structure matters
        return tf.zeros(dims, spec.dtype)

    if isinstance(source, tuple | list):
        x, y = check_arrays(source)
        return x[:2], y[:2]
    if callable(source) and not isinstance(source, tf.data.Dataset):
        source = source(tf.distribute.InputContext())
    spec = getattr(source, "element_spec", None)
    if not isinstance(spec, tuple) or len(spec) not in (2, 3):
        raise ConfigError(
            f"dataset elements must be (features, labels) or (features, labels, sample_weights); got {spec}."
        )
    if any(part.shape.rank == 0 for part in tf.nest.flatten(spec[:2]) if isinstance(part, tf.TensorSpec)):
        raise ConfigError(
            f"the dataset is not batched: its elements are single examples ({spec}). "
            "Hint: call .batch(GLOBAL_BATCH) on it."
        )
    if any(part.shape.rank is None for part in tf.nest.flatten(spec[:2])):
        # Shapes known only at run time (e.g. a py_function in the pipeline): read one real batch.
        for element in source.take(1):
            first_rows = [tf.nest.map_structure(lambda t: t[:2], element[i]) for i in (0, 1)]
            return first_rows[0], first_rows[1]
        raise ConfigError("the dataset is empty: it yields no batch to train on.")
    return tf.nest.map_structure(zeros, spec[0]), tf.nest.map_structure(zeros, spec[1])
