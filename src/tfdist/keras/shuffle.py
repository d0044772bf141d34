"""``model.fit(x, y)``'s default shuffle, agreed across workers.

Keras shuffles arrays (its array data adapter) with an unseeded ``tf.random.shuffle`` of the example
indices, drawn anew each epoch. Under MultiWorkerMirroredStrategy every worker runs that pipeline and
keeps its share of the batches (DATA auto-sharding), so unseeded draws give each worker a different
order: together the workers skip some examples and repeat others in every epoch. TensorFlow's own
tutorials warn about it; nothing stops it.

Here, while Keras builds a multi-worker epoch iterator (and no global seed is set), that shuffle is
replaced by a stateless shuffle whose seed is (the job's seed, this shuffle's number, the epoch): every
worker draws the same permutation of every epoch, and each epoch still draws a new one. The job's seed is
drawn by the chief and sent to every worker in one scalar all-reduce, once per process, so two runs still
shuffle differently, as one process does. A seed the user set (``keras.utils.set_random_seed``) is left
alone: Keras' own shuffle is then the same on every worker already.
"""

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
    """While Keras builds an epoch iterator: unseeded ``tf.random.shuffle`` calls become the agreed
    shuffle. Yields whether it did (no global seed set); the caller then calls :func:`agree_seed`."""
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
    """A stateless shuffle seeded by (job seed + ``number``, epoch): the epoch counts the times the
    pipeline draws this permutation (once per epoch's iterator), in Python, which holds the count."""
    import tensorflow as tf

    epochs = itertools.count()

    def seed() -> Any:
        return tf.constant([_JOB_SEED[0] + number, next(epochs)], dtype=tf.int64)

    pair = tf.py_function(seed, [], tf.int64)
    pair.set_shape([2])
    return tf.random.experimental.stateless_shuffle(value, seed=pair, name=name)


def agree_seed(strategy: Any) -> None:
    """The job's seed on every worker: the chief's random draw, summed with the others' zeros (once per
    process; every worker builds its first shuffled epoch iterator in the same ``fit`` call)."""
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
