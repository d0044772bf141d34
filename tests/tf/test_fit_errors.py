"""tfdist.fit and tfdist train refuse bad input with one clear ConfigError (real TensorFlow, one process)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from helpers.cli import cli, tfdist
from tfdist.errors import ConfigError
from tfdist.train.batches import plan_batches


def small_model(compiled: bool = True, units: int = 1):
    import keras

    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(units)])
    if compiled:
        model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse", metrics=["mae"])
    return model


XY = (np.ones((32, 3), "float32"), np.ones((32, 1), "float32"))


def test_global_batch_not_divisible_names_both_numbers_and_valid_values() -> None:
    with pytest.raises(ConfigError) as info:
        plan_batches(30, 4, 100, None)
    assert str(info.value) == "global batch 30 is not divisible by the 4 replicas; use 28 or 32."


def test_not_compiled() -> None:
    import tfdist

    with pytest.raises(ConfigError, match="not compiled"):
        tfdist.fit(small_model(compiled=False), XY, batch_size=8, epochs=1)


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"epochs": 0}, "epochs=0 must be a positive integer"),
        ({"epochs": 1, "checkpoint_every": 0}, "checkpoint_every=0"),
        ({"epochs": 1, "lr_scaling": "cubic"}, "lr_scaling='cubic' is unknown"),
        ({"epochs": 1, "batch_size": None}, "need batch_size="),
    ],
)
def test_bad_fit_arguments(kwargs: dict, expected: str) -> None:
    import tfdist

    kwargs.setdefault("batch_size", 8)
    with pytest.raises(ConfigError, match=expected):
        tfdist.fit(small_model(), XY, **kwargs)


def test_dataset_elements_of_the_wrong_structure() -> None:
    import tensorflow as tf

    import tfdist

    dataset = tf.data.Dataset.from_tensor_slices(XY[0]).batch(8)
    with pytest.raises(ConfigError, match="dataset elements must be"):
        tfdist.fit(small_model(), dataset, epochs=1)


def test_checkpoint_dir_not_creatable(tmp_path: Path) -> None:
    import tfdist

    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(ConfigError, match="cannot be created"):
        tfdist.fit(small_model(), XY, batch_size=8, epochs=1, checkpoint_dir=str(blocker / "ckpt"), verbose=0)


def test_checkpoint_from_a_different_model(tmp_path: Path) -> None:
    import tfdist

    tfdist.fit(small_model(units=1), XY, batch_size=8, epochs=1, checkpoint_dir=str(tmp_path), verbose=0)
    with pytest.raises(ConfigError, match="does not match this model"):
        tfdist.fit(
            small_model(units=2),
            (XY[0], np.ones((32, 2), "float32")),
            batch_size=8,
            epochs=2,
            checkpoint_dir=str(tmp_path),
            verbose=0,
        )


def test_model_built_outside_the_strategy_scope() -> None:
    import tfdist

    tfdist.strategy()
    with pytest.raises(ConfigError, match="outside the strategy scope"):
        tfdist.fit(small_model(), XY, batch_size=8, epochs=1)


def test_fit_trains_and_writes_run_files(tmp_path: Path) -> None:
    import json

    import tfdist

    strategy = tfdist.strategy()
    with strategy.scope():
        model = small_model()
    history = tfdist.fit(model, XY, batch_size=8, epochs=2, run_dir=str(tmp_path), verbose=0)
    assert len(history.history["loss"]) == 2 and history.history["loss"][1] < history.history["loss"][0]
    assert json.loads((tmp_path / "metrics.json").read_text())["summary"]["steps"] == 8
    assert (tmp_path / "curves.png").stat().st_size > 1000


CLI_CASES = [
    (["--epochs", "0"], "--epochs=0"),
    (["--lr", "0"], "--lr=0"),
    (["--lr", "-1"], "--lr=-1"),
    (["--workload", "gpt"], "--workload 'gpt' is unknown"),
    (["--dataset", "imagenet"], "--dataset: unknown dataset 'imagenet'"),
    (["--lr-scaling", "cubic"], "--lr-scaling 'cubic'"),
    (["--epochs", "two"], "'two' is not an integer"),
    (["--mixed-precision", "fp8"], "--mixed-precision 'fp8'"),
]


@pytest.mark.parametrize(("argv", "expected"), CLI_CASES, ids=[" ".join(c[0]) for c in CLI_CASES])
def test_train_cli_bad_input(
    argv: list[str], expected: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = cli(capsys, "train", "--run-dir", str(tmp_path / "run"), *argv)
    assert code == 2
    assert expected in err and err.count("\n") == 1
    assert not (tmp_path / "run").exists()


def test_train_refuses_to_overwrite_checkpoints_without_resume(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "checkpoint").write_text("x")
    code, _, err = cli(capsys, "train", "--run-dir", str(tmp_path))
    assert code == 2 and "--resume" in err


@pytest.mark.multiprocess
@pytest.mark.slow  # 10 epochs; the first tier runs the same command for 1 epoch (the README's example)
def test_readme_main_job_reaches_090_on_digits(tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = tfdist("train", "--workers", "2", "--epochs", "10", "--run-dir", str(out), timeout=400)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    import json

    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["history"]["val_accuracy"][-1] >= 0.90
    assert metrics["summary"]["world_size"] == 2 and metrics["summary"]["replicas"] == 2
    assert "test accuracy" in proc.stdout and str(out) in proc.stdout
    assert (out / "model.keras").is_file() and (out / "curves.png").is_file()


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (lambda tf: tf.data.Dataset.from_tensor_slices((["a", "b"], [1.0, 2.0])).batch(2), "yields strings"),
        (
            lambda tf: tf.data.Dataset.from_tensor_slices((np.ones((4, 3), "float32"), np.ones(4))),
            "not batched",
        ),
        (
            lambda tf: tf.data.Dataset.from_tensor_slices(np.ones((4, 3), "float32")).batch(2),
            "dataset elements must be",
        ),
        (
            lambda tf: tf.data.Dataset.from_tensor_slices((np.ones((0, 3), "float32"), np.ones(0))).batch(2),
            "is empty",
        ),
    ],
)
def test_datasets_tfdist_fit_cannot_train_on(make, expected: str) -> None:
    import tensorflow as tf

    import tfdist

    with pytest.raises(ConfigError, match=expected):
        tfdist.fit(small_model(), make(tf), epochs=1)


def test_dynamic_batch_not_divisible_by_the_replicas_is_refused() -> None:
    import tensorflow as tf

    from tfdist.train.data import DistributedData

    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    data = tf.data.Dataset.from_tensor_slices(XY).batch(8)  # batch dimension None; the first batch says 8
    with pytest.raises(ConfigError, match="global batch 8 is not divisible by the 3 replicas; use 6 or 9"):
        # as rank 0 of 3 MPI ranks: 3 replicas share each global batch
        DistributedData(
            strategy, data, batch_size=None, steps_per_epoch=None, shuffle=False, seed=0, processes=(0, 3)
        )
