"""Callbacks, warnings, workloads, mixed precision and XLA through tfdist.fit and tfdist train."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from helpers.cli import tfdist


def compiled(units: int = 1):
    import keras

    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(units)])
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse", metrics=["mae"])
    return model


XY = (np.random.default_rng(0).normal(size=(64, 3)).astype("float32"), np.ones((64, 1), "float32"))


def test_keras_callbacks_are_honoured(tmp_path: Path) -> None:
    import keras

    import tfdist

    seen: list[int] = []
    callbacks = [
        keras.callbacks.EarlyStopping(monitor="loss", min_delta=1e9, patience=1),  # never "improves"
        keras.callbacks.CSVLogger(str(tmp_path / "log.csv")),
        keras.callbacks.LambdaCallback(on_epoch_end=lambda epoch, logs: seen.append(epoch)),
    ]
    history = tfdist.fit(compiled(), XY, batch_size=16, epochs=10, callbacks=callbacks, verbose=0)
    assert seen == [0, 1] and len(history.history["loss"]) == 2
    rows = (tmp_path / "log.csv").read_text().splitlines()
    assert rows[0].startswith("epoch") and len(rows) == 3


def test_strategy_warnings_are_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    from tfdist.strategies import build_strategy
    from tfdist.strategies.plan import StrategyPlan

    plan = StrategyPlan(kind="one_device", reason="test", warnings=("use tfdist.fit, not model.fit (test)",))
    build_strategy(plan)
    build_strategy(plan)
    assert [r.getMessage() for r in caplog.records].count("use tfdist.fit, not model.fit (test)") == 1


def test_mnist_cnn_has_the_documented_parameter_count() -> None:
    from tfdist.workloads import models

    assert models.build("mnist-cnn", (28, 28, 1), 10).count_params() == 1_199_882


def test_mobilenetv2_builds_for_the_dataset_shape() -> None:
    from tfdist.workloads import models

    model = models.build("mobilenetv2", (32, 32, 3), 5)
    assert model.output_shape == (None, 5)


def test_lr_scaling_and_warmup_reach_the_scaled_rate() -> None:
    import tfdist

    model = compiled()
    tfdist.fit(model, XY, batch_size=16, epochs=2, lr_scaling="linear", warmup_epochs=1, verbose=0)
    assert float(model.optimizer.learning_rate.numpy()) == pytest.approx(0.1)  # 1 replica: linear x1


@pytest.mark.parametrize("flags", [["--xla"], ["--mixed-precision", "bf16"]])
def test_train_with_xla_or_mixed_precision(flags: list[str], tmp_path: Path) -> None:
    out = str(tmp_path / "run")
    proc = tfdist("train", "--epochs", "1", "--steps-per-epoch", "5", "--run-dir", out, *flags, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "test accuracy" in proc.stdout
    assert any((tmp_path / "run" / "tensorboard").iterdir())


@pytest.mark.parametrize("name", ["model.keras", "model.weights.h5", "exported"])
def test_save_model_formats_are_written_atomically(name: str, tmp_path: Path) -> None:
    import tfdist

    model = compiled()
    path = tmp_path / "out" / name
    assert tfdist.save_model(model, str(path)) == str(path)
    assert path.exists()
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [name]  # no temporary left behind
    if name == "exported":
        assert (path / "saved_model.pb").is_file()


def test_steps_per_epoch_beyond_the_data_cycles_it() -> None:
    import tfdist

    history = tfdist.fit(
        compiled(), XY, batch_size=16, epochs=2, steps_per_epoch=10, verbose=0
    )  # 4 batches of data
    assert history.summary["steps"] == 20 and history.summary["examples"] == 320
