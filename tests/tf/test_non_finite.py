"""A NaN or infinite loss stops training where it happened, names the step, and keeps the last good
checkpoint; on_nan="continue" trains on."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from helpers.cli import cli


def _model() -> object:
    import keras

    import tfdist

    with tfdist.strategy().scope():
        keras.utils.set_random_seed(0)
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
        model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse")
    return model


def _data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x, y = rng.random((256, 4), dtype=np.float32), rng.random((256, 1), dtype=np.float32)
    x[200] = np.nan  # in the 7th batch of 32
    return x, y


def test_a_nan_stops_at_its_step_and_keeps_the_last_good_checkpoint(tmp_path: Path) -> None:
    import tensorflow as tf

    import tfdist

    model = _model()
    with pytest.raises(tfdist.NonFiniteLossError) as info:
        tfdist.fit(
            model,
            _data(),
            batch_size=32,
            epochs=2,
            verbose=0,
            shuffle=False,
            log_every=3,
            checkpoint_dir=str(tmp_path),
            checkpoint_every=3,
        )
    message = str(info.value)
    assert "the loss became NaN at step 7 (epoch 1, step 7 of 8)" in message
    assert "last finite loss" in message and "(at step 6)" in message and "\n" not in message
    latest = tf.train.latest_checkpoint(str(tmp_path))
    assert latest is not None and latest.endswith("ckpt-6")  # nothing saved after the NaN
    reader = tf.train.load_checkpoint(latest)
    dtypes = reader.get_variable_to_dtype_map()
    saved = [reader.get_tensor(k) for k, dtype in dtypes.items() if dtype.is_floating]
    assert saved and all(np.all(np.isfinite(w)) for w in saved)


def test_on_nan_continue_trains_on() -> None:
    import tfdist

    history = tfdist.fit(
        _model(), _data(), batch_size=32, epochs=1, verbose=0, shuffle=False, on_nan="continue"
    )
    assert np.isnan(history.history["loss"][0])


def test_the_cli_says_it_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    code, _, stderr = cli(
        capsys, "train", "--workload", "regression", "--lr", "1e30", "--epochs", "2", "--run-dir", str(out)
    )
    err = stderr.strip().splitlines()
    assert code == 1
    assert [line for line in err if "the loss became" in line] == [err[-1]]
    assert err[-1].startswith("tfdist train: the loss became")
    assert not os.path.exists(out / "model.keras")
