"""A run interrupted mid-epoch and resumed ends exactly where the uninterrupted run does: dropout's random
state and the epoch's partial metric sums are in the checkpoint."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import numpy as np
import pytest

STEPS, EPOCHS = 6, 2


def _train(checkpoint_dir: Path, interrupt_at: int) -> tuple[list[np.ndarray], dict[str, list[float]]]:
    """mnist-cnn-like (dropout) on random images; SIGTERM to this process inside step ``interrupt_at``."""
    import keras
    import tensorflow as tf

    import tfdist

    calls = {"n": 0}

    def count(x: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == interrupt_at:
            os.kill(
                os.getpid(), signal.SIGTERM
            )  # tfdist.fit checkpoints at the next results read, then exits
        return x

    class Interrupt(keras.layers.Layer):
        def call(self, x: Any, training: bool = False) -> Any:
            if not training:
                return x
            out = tf.py_function(count, [x], x.dtype, name="interrupt")
            out.set_shape(x.shape)
            return out

    with tfdist.strategy().scope():
        keras.utils.set_random_seed(3)
        model = keras.Sequential(
            [
                keras.Input((8, 8, 1)),
                keras.layers.Conv2D(4, 3, activation="relu"),
                keras.layers.Dropout(0.5),
                keras.layers.Flatten(),
                Interrupt(),
                keras.layers.Dropout(0.3),
                keras.layers.Dense(10),
            ]
        )
        model.compile(
            optimizer=keras.optimizers.SGD(0.1),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            metrics=["accuracy"],
        )
    rng = np.random.default_rng(0)
    x, y = rng.random((16 * STEPS, 8, 8, 1), dtype=np.float32), rng.integers(0, 10, 16 * STEPS)
    history = tfdist.fit(
        model,
        (x, y),
        batch_size=16,
        epochs=EPOCHS,
        verbose=0,
        checkpoint_dir=str(checkpoint_dir),
        checkpoint_every=2,
        log_every=1,
    )
    hist = {k: v for k, v in history.history.items() if k != "examples_per_sec"}
    return model.get_weights(), hist


def test_resume_mid_epoch_is_exact(tmp_path: Path) -> None:
    import tensorflow as tf

    reference_weights, reference_history = _train(tmp_path / "reference", interrupt_at=-1)
    with pytest.raises(SystemExit) as stopped:
        _train(tmp_path / "run", interrupt_at=STEPS + 3)  # inside epoch 2
    assert stopped.value.code == 128 + signal.SIGTERM
    saved = tf.train.latest_checkpoint(str(tmp_path / "run"))
    assert saved is not None and int(saved.rsplit("-", 1)[1]) % STEPS != 0  # a mid-epoch checkpoint
    weights, history = _train(tmp_path / "run", interrupt_at=-1)  # a new process would do the same
    assert max(float(np.max(np.abs(a - b))) for a, b in zip(weights, reference_weights, strict=True)) <= 1e-6
    # The resumed epoch reports all of its steps, not only those after the restart.
    assert history["loss"][-1] == pytest.approx(reference_history["loss"][-1], abs=1e-6)
    assert history["accuracy"][-1] == pytest.approx(reference_history["accuracy"][-1], abs=1e-6)
