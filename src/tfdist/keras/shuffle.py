"""``model.fit(x, y)``'s default shuffle, agreed across workers: Keras' unseeded ``tf.random.shuffle``
(workers drawing different orders skip and repeat examples) becomes a stateless one seeded by (the chief's
seed, this shuffle's number, the epoch) while no global seed is set."""

from __future__ import annotations

import contextlib
import itertools
import secrets
from collections.abc import Iterator
from typing import Any

_JOB_SEED: list[int] = []
#: Per-process numbering of the shuffles built: the same on every worker, which runs the same script.
_SHUFFLES = itertools.count()


def unseeded() -> bool:
    """True when no global seed is set, so Keras' shuffle would draw differently on every worker."""
    from tensorflow.python.framework import random_seed

    return bool(random_seed.get_seed(None) == (None, None))


@contextlib.contextmanager
def agreed_shuffles() -> Iterator[bool]:
    """Unseeded ``tf.random.shuffle`` calls become the agreed shuffle inside; yields whether they did."""
    import tensorflow as tf

    if not unseeded():
        yield False
        return
    original = tf.random.shuffle

    def shuffle(value: Any, seed: Any = None, name: Any = None) -> Any:
        if seed is not None:
            return original(value, seed=seed, name=name)
        return _epoch_shuffle(value, next(_SHUFFLES), name)

    tf.random.shuffle = shuffle
    try:
        yield True
    finally:
        tf.random.shuffle = original


def _epoch_shuffle(value: Any, number: int, name: Any) -> Any:
    """A stateless shuffle seeded by (job seed + ``number``, the epoch counted in Python)."""
    import tensorflow as tf

    epochs = itertools.count()

    def seed() -> Any:
        return tf.constant([_JOB_SEED[0] + number, next(epochs)], dtype=tf.int64)

    pair = tf.py_function(seed, [], tf.int64)
    pair.set_shape([2])
    return tf.random.experimental.stateless_shuffle(value, seed=pair, name=name)


def agree_seed(strategy: Any) -> None:
    """The job's seed on every worker (once per process): the chief's random draw summed with zeros."""
    if _JOB_SEED:
        return
    import tensorflow as tf

    from tfdist.keras.checks import worker_identity

    chief, _ = worker_identity(strategy)
    drawn = secrets.randbelow(2**31) if chief else 0

    @tf.function  # eagerly, a collective strategy's run warns of its overhead on every worker
    def agree() -> Any:
        # Every replica of the chief adds the draw: the sum is a multiple of it, the same on every worker.
        return strategy.reduce("SUM", strategy.run(lambda: tf.constant(drawn, tf.int64)), axis=None)

    _JOB_SEED.append(int(agree()))
