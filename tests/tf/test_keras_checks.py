"""What the Keras fix checks before a multi-worker fit, on real tf.data pipelines."""

from __future__ import annotations

import numpy as np


class _Adapter:
    """Stands in for Keras' TFDatasetAdapter, which keeps the user's dataset as ``_dataset``."""

    def __init__(self, dataset: object) -> None:
        self._dataset = dataset


def test_unseeded_shuffle_is_found_anywhere_in_the_pipeline() -> None:
    import tensorflow as tf

    from tfdist.keras.checks import unseeded_shuffle

    base = tf.data.Dataset.from_tensor_slices(np.arange(10))
    assert unseeded_shuffle(_Adapter(base.shuffle(10).map(lambda v: v * 2).batch(2).prefetch(1)))
    assert not unseeded_shuffle(_Adapter(base.shuffle(10, seed=3).batch(2)))
    assert not unseeded_shuffle(_Adapter(base.batch(2)))
    tf.random.set_seed(7)  # a global seed makes every worker draw the same order
    try:
        assert not unseeded_shuffle(_Adapter(base.shuffle(10).batch(2)))
    finally:
        tf.random.set_seed(None)
