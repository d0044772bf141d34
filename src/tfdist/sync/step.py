"""One replica step for every backend, and the compiled train / evaluation steps built around it.

Each step returns ONE vector of sums [loss, metric..., examples, stop votes]; the synchroniser
(:mod:`tfdist.sync.base`) decides whether that vector is reduced across the job inside the step (the
process-level backends, together with the gradients) or when the loop reads results (TensorFlow's
collectives). Every worker then sees identical numbers and agrees on stopping at the same step boundary.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def loss_function(model: Any) -> tuple[Callable[[Any, Any], Any], str]:
    """Per-example loss from ``model.compile(loss=...)`` and its name; ConfigError when not compiled."""
    import keras

    from tfdist.errors import ConfigError

    if getattr(model, "optimizer", None) is None or getattr(model, "loss", None) is None:
        raise ConfigError(
            "the model is not compiled. Hint: call model.compile(optimizer=..., loss=..., metrics=[...]) "
            "inside strategy.scope() before tfdist.fit."
        )
    loss = model.loss
    if isinstance(loss, list | dict):
        raise ConfigError("tfdist.fit supports one loss per model; got a list or dict of losses.")
    fn = keras.losses.get(loss)
    name = loss if isinstance(loss, str) else getattr(fn, "name", type(fn).__name__)
    if isinstance(fn, keras.losses.Loss):
        return fn.call, str(name)  # .call skips Keras' reduction: we need per-example values
    return fn, str(name)


def per_example_loss(loss_fn: Callable[[Any, Any], Any], y: Any, pred: Any, w: Any) -> Any:
    """One float32 loss per example (losses with extra axes are averaged over them)."""
    import tensorflow as tf

    values = tf.reshape(tf.cast(loss_fn(y, pred), tf.float32), [tf.shape(w)[0], -1])
    return tf.reduce_mean(values, axis=-1)


def global_sums(metrics: Any, y: Any, pred: Any, per_example: Any, w: Any, s: Any, stop: Any) -> Any:
    """The vector every backend reduces each step: [loss sum, metric state…, example count, stop votes].

    ``metrics`` is a :class:`tfdist.train.metrics.MetricSet`; ``s`` the rows' loss shares (0 on padding,
    see :mod:`tfdist.train.data`). The example count leaves out the padding, not the examples a user
    weighted 0, and the loss is reported as Keras does: sum of weighted per-example losses / examples.
    """
    import tensorflow as tf

    real = s > 0
    count = tf.reduce_sum(tf.cast(real, tf.float32))
    return tf.concat(
        [
            tf.reshape(tf.reduce_sum(per_example * w), [1]),
            metrics.sums(y, pred, w, real),
            tf.reshape(count, [1]),
            tf.reshape(tf.cast(stop, tf.float32), [1]),
        ],
        0,
    )


def replica_train_step(
    model: Any,
    loss_fn: Callable[[Any, Any], Any],
    metrics: Any,
    sync: Any,
    own_data: bool = False,
    shard: Any = None,
) -> Callable[[Any, Any, Any, Any, Any], Any]:
    """THE training step of one replica, for every backend: forward, loss averaged over the GLOBAL batch,
    gradients, ``sync.exchange``, ``apply_gradients``; returns the step's sums (:func:`global_sums`).

    ``sync`` is a :class:`tfdist.sync.base.Synchroniser`. Averaging over the global batch (not the
    replica's: each row's share ``s`` is 1 / the real rows of its global batch, a partial last one
    included) because the gradients are then summed over every replica: by Keras 3 inside
    ``apply_gradients`` under a strategy, or by the synchroniser across processes.

    ``own_data``: each worker's data is its own (:mod:`tfdist.train.uneven`): no worker knows how many
    real rows the global batch holds, so ``s`` marks this replica's real rows (1) and is divided here by
    the job's count of them (``sync.step_total``, one all-reduce of a number).

    ``shard``: a :class:`tfdist.sync.shard.ShardedOptimizer`, which then does the exchange and the update
    (reduce-scatter, the update of this rank's shard, all-gather) in place of ``exchange`` + ``apply``.
    """
    import tensorflow as tf

    optimizer = model.optimizer

    def step(x: Any, y: Any, w: Any, s: Any, stop: Any) -> Any:
        if own_data:
            real = tf.cast(s > 0, tf.float32)
            s = real / tf.maximum(sync.step_total(tf.reduce_sum(real)), 1.0)
        variables = model.trainable_variables
        with tf.GradientTape() as tape:
            pred = model(x, training=True)
            per_example = per_example_loss(loss_fn, y, pred, w)
            loss = tf.reduce_sum(per_example * w * s)
            if model.losses:
                loss += sync.regularization(tf.add_n(model.losses))
            scaled = optimizer.scale_loss(loss) if hasattr(optimizer, "scale_loss") else loss
        grads = tape.gradient(scaled, variables)
        if shard is not None:  # under a timeline, stamped as the exchange would be (see MarkedSync)
            stamps = sync.for_shard() if hasattr(sync, "for_shard") else None
            return shard.apply(list(grads), global_sums(metrics, y, pred, per_example, w, s, stop), stamps)
        grads, sums = sync.exchange(list(grads), global_sums(metrics, y, pred, per_example, w, s, stop))
        optimizer.apply_gradients(zip(grads, variables, strict=True))
        return sums

    return step


def replica_eval_step(
    model: Any, loss_fn: Callable[[Any, Any], Any], metrics: Any, sync: Any
) -> Callable[[Any, Any, Any, Any], Any]:
    """One replica's evaluation step: the sums of :func:`global_sums` (no stop vote), through ``sync``."""

    def step(x: Any, y: Any, w: Any, s: Any) -> Any:
        pred = model(x, training=False)
        sums = global_sums(metrics, y, pred, per_example_loss(loss_fn, y, pred, w), w, s, 0.0)
        return sync.exchange_sums(sums)

    return step


def make_steps(
    strategy: Any,
    model: Any,
    loss_fn: Callable[[Any, Any], Any],
    metrics: Any,
    step_var: Any,
    sync: Any,
    jit_compile: bool = False,
    own_data: bool = False,
    shard: Any = None,
) -> tuple[Any, Any]:
    """Build (train_step, eval_step); both take a distributed batch (x, y, w, s) and return this worker's sums
    over its local replicas (the job's sums when the synchroniser reduced them in the step). ``own_data``,
    ``shard``: see :func:`replica_train_step`."""
    import tensorflow as tf

    train_replica = replica_train_step(model, loss_fn, metrics, sync, own_data, shard)
    eval_replica = replica_eval_step(model, loss_fn, metrics, sync)

    def local_sum(per_replica: Any) -> Any:
        return tf.add_n(list(strategy.experimental_local_results(per_replica)))

    # Process-level all-reduces (numpy_function, Horovod's ops) cannot be compiled by XLA.
    @tf.function(jit_compile=(jit_compile or None) if sync.jit_ok else False)
    def train_step(batch: Any, stop: Any) -> Any:
        x, y, w, s = batch
        totals = local_sum(strategy.run(train_replica, args=(x, y, w, s, stop)))
        step_var.assign_add(1)
        return totals

    @tf.function
    def eval_step(batch: Any) -> Any:
        x, y, w, s = batch
        return local_sum(strategy.run(eval_replica, args=(x, y, w, s)))

    return train_step, eval_step
