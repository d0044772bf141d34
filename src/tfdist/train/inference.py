"""``tfdist.evaluate`` and ``tfdist.predict``: ``tfdist.fit``'s inputs, the same global numbers on every
worker. Evaluation pads a partial last batch with zero-weight rows and sums loss and metric state in one
all-reduce; prediction gathers every worker's slice of each global batch and drops the padding.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tfdist import context
from tfdist.errors import ConfigError
from tfdist.sync import synchroniser
from tfdist.sync.step import loss_function, make_steps
from tfdist.train.batches import sample_inputs
from tfdist.train.callbacks import chief_filtered, overrides
from tfdist.train.data import DistributedData
from tfdist.train.metrics import MetricSet
from tfdist.train.trainer import ensure_built, strategy_of


def _distributed(
    model: Any, data: Any, batch_size: int | None, steps: int | None, per_worker: bool | None = None
) -> tuple[Any, Any, Any, tuple[Any, Any]]:
    """(strategy, synchroniser, padded distributed batches, a sample batch) for ``data``."""
    sample = sample_inputs(data)
    ensure_built(model, sample[0])
    strategy = strategy_of(model)
    sync = synchroniser(strategy)
    processes = sync.processes
    batches = DistributedData(
        strategy,
        data,
        batch_size=batch_size,
        steps_per_epoch=steps,
        shuffle=False,
        seed=0,
        processes=processes,
        table=sync.table,
        per_worker=per_worker,
    )
    return strategy, sync, batches, sample


def evaluate(
    model: Any,
    data: Any,
    *,
    batch_size: int | None = None,
    steps: int | None = None,
    verbose: int = 0,
    return_dict: bool = False,
    callbacks: Sequence[Any] = (),
    per_worker_data: bool | None = None,
) -> Any:
    """Loss and compiled metrics of ``model`` over ``data``, identical on every worker.

    ``data`` as in :func:`tfdist.fit` (NumPy ``(x, y)`` with ``batch_size``, a batched dataset of
    ``(x, y[, w])``, or a ``dataset_fn`` with ``steps``). Returns ``[loss, metric…]`` like Keras, or a dict.
    ``callbacks`` get Keras' test hooks (``on_test_batch_end`` with the running logs, the same on every
    worker; a results read per batch only when a callback overrides it). ``per_worker_data``: as in
    :func:`tfdist.fit` (each worker's own data: every worker gets the loss over all of them).
    """
    strategy, sync, batches, sample = _distributed(model, data, batch_size, steps, per_worker_data)
    loss_fn, _ = loss_function(model)
    metrics = MetricSet(model, strategy, *sample)
    _, eval_step = make_steps(strategy, model, loss_fn, metrics, None, sync)
    hooks = _callback_list(model, callbacks, batches.plan.steps_per_epoch)
    per_batch = any(overrides(cb, ("on_test_batch_end",)) for cb in callbacks)
    hooks.on_test_begin()
    local, batch = None, -1
    for batch, (data_batch, _) in enumerate(batches.stream(batches.epoch(0), sync.agree)):
        hooks.on_test_batch_begin(batch)
        out = eval_step(data_batch)
        local = out if local is None else local + out
        if per_batch:
            hooks.on_test_batch_end(batch, metrics.logs(np.asarray(sync.reduce_totals(local))[:-1]))
    totals = np.asarray(sync.reduce_totals(local))[:-1] if local is not None else np.zeros(metrics.width)
    logs = metrics.logs(totals)
    if not per_batch:
        hooks.on_test_batch_end(batch, logs)
    hooks.on_test_end(logs)
    if verbose and context.current().environment.is_chief:
        print(" - ".join(f"{k}: {v:.4f}" for k, v in logs.items()), flush=True)
    return logs if return_dict else list(logs.values())


def predict(
    model: Any,
    data: Any,
    *,
    batch_size: int | None = None,
    steps: int | None = None,
    callbacks: Sequence[Any] = (),
    per_worker_data: bool | None = None,
) -> np.ndarray:
    """``model``'s outputs for every example of ``data``, once, in order, on every worker.

    ``data``: NumPy ``x`` with ``batch_size``, or a batched dataset of ``x`` (or of ``(x, y)``; ``y`` is
    ignored). Single-output models. ``callbacks`` get Keras' predict hooks: ``on_predict_batch_end(batch,
    {"outputs": ...})`` with the global batch's outputs (padding left out), the same on every worker.
    ``per_worker_data``: as in :func:`tfdist.fit`; each worker's own examples then come in the order of
    the global batches (worker 0's batch, worker 1's, ... of each step).
    """
    import tensorflow as tf

    data = _with_dummy_labels(data)
    strategy, sync, batches, _ = _distributed(model, data, batch_size, steps, per_worker_data)

    @tf.function
    def predict_step(batch: Any) -> Any:
        x, _, _, s = batch  # s > 0: a real row, not padding
        outputs = strategy.run(lambda v: model(v, training=False), args=(x,))
        return strategy.gather(outputs, axis=0), strategy.gather(s, axis=0)

    hooks = _callback_list(model, callbacks, batches.plan.steps_per_epoch)
    hooks.on_predict_begin()
    parts = []
    for batch, (data_batch, _) in enumerate(batches.stream(batches.epoch(0), sync.agree)):
        hooks.on_predict_batch_begin(batch)
        outputs, weights = (np.asarray(t) for t in predict_step(data_batch))
        # Process-level ranks each predicted their slice of the global batch: joined in rank order.
        outputs, weights = sync.allgather(outputs), sync.allgather(weights)
        parts.append(outputs[weights > 0])
        hooks.on_predict_batch_end(batch, {"outputs": parts[-1]})
    hooks.on_predict_end()
    return np.concatenate(parts, axis=0)


def _callback_list(model: Any, callbacks: Sequence[Any], steps: int) -> Any:
    """Keras' CallbackList over the user's callbacks (the chief-only ones on the chief only)."""
    from keras.callbacks import CallbackList

    kept = chief_filtered(callbacks, context.current().environment.is_chief)
    return CallbackList(kept, model=model, epochs=1, steps=steps or None, verbose=0)


def _with_dummy_labels(data: Any) -> Any:
    """Prediction inputs in the ``(x, y)`` form the input pipeline expects (labels are never read)."""
    import tensorflow as tf

    if isinstance(data, np.ndarray):
        return data, np.zeros(len(data), np.float32)
    if isinstance(data, tf.data.Dataset):
        spec = data.element_spec
        if isinstance(spec, tuple) and len(spec) in (2, 3):
            return data
        if isinstance(spec, tuple) and len(spec) == 1:
            data = data.map(lambda x: x)
        return data.map(lambda x: (x, tf.zeros(tf.shape(tf.nest.flatten(x)[0])[:1])))
    raise ConfigError(
        "tfdist.predict takes NumPy x (with batch_size) or a batched tf.data.Dataset; got "
        f"{type(data).__name__}."
    )
