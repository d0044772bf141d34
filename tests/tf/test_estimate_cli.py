"""``tfdist estimate`` on each kind of input (a workload, a script's builder, a .keras file) and its
one-line refusals of bad input (real Keras, in this process; no weights are allocated)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers.cli import cli

SCRIPT = """
import keras


def build_model():
    model = keras.Sequential([keras.Input((784,)), keras.layers.Dense(512, activation="relu"),
                              keras.layers.Dense(10)])
    model.compile(optimizer=keras.optimizers.RMSprop(momentum=0.9), loss="mse")
    return model


def not_a_model():
    return 42


if __name__ == "__main__":
    raise SystemExit("the training part must not run")
"""


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "train.py"
    path.write_text(SCRIPT)
    return path


def read_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict:
    code, out, err = cli(capsys, "estimate", *args, "--format", "json", "--device-memory", "80GB")
    assert code == 0, err
    return json.loads(out)


def terms(report: dict) -> dict[str, int]:
    return {t["name"]: t["bytes"] for t in report["terms"]}


def test_a_workload(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "e.json"
    code, out, err = cli(
        capsys, "estimate", "--workload", "mnist-cnn", "--batch-size-per-replica", "64", "--json", str(path)
    )
    assert code == 0, err
    assert "activations" in out and "margin" in out
    report = json.loads(path.read_text())
    assert report["params"] == 1_199_882 and report["optimizer"] == "adam"
    assert terms(report)["weights"] == 1_199_882 * 4


def test_a_scripts_builder_with_its_compiled_optimizer(
    capsys: pytest.CaptureFixture[str], script: Path
) -> None:
    report = read_json(capsys, f"{script}:build_model", "--batch-size-per-replica", "32", "--replicas", "8")
    params = 784 * 512 + 512 + 512 * 10 + 10
    assert report["params"] == params
    assert (report["optimizer"], report["optimizer_slots"]) == ("rmsprop", 2)
    assert terms(report)["activations"] == 32 * (512 + 10) * 4
    assert terms(report)["all-reduce buffer"] == params * 4
    assert report["fits"] is True


def test_a_keras_file_read_without_its_weights(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    import keras

    model = keras.Sequential(
        [keras.Input((32, 32, 3)), keras.layers.Conv2D(8, 3), keras.layers.Flatten(), keras.layers.Dense(10)]
    )
    model.compile(optimizer="sgd", loss="mse")
    path = tmp_path / "m.keras"
    model.save(path)
    report = read_json(capsys, str(path), "--batch-size-per-replica", "4", "--mixed-precision", "fp16")
    assert report["params"] == model.count_params()
    assert (report["optimizer"], report["optimizer_slots"]) == ("sgd", 0)
    assert terms(report)["activations"] == 4 * (30 * 30 * 8 + 10) * 2  # Flatten is a view


def test_a_device_too_small_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(capsys, "estimate", "--workload", "regression", "--device-memory", "100MiB")
    assert code == 1 and "does not fit" in out


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["{script}:missing"], "has no function 'missing'"),
        (["{script}:build_modle"], "has no function 'build_modle'. Hint: did you mean build_model?"),
        (["{script}:not_a_model"], "returned int, not a Keras model"),
        (["--workload", "mnist-cnn", "--batch-size-per-replica", "0"], "at least one example"),
        (["--workload", "mnist-cnn", "--batch-size-per-replica", "-3"], "at least one example"),
        (["--workload", "mnist-cnn", "--device-memory", "lots"], "'lots' is not a memory size"),
        (["--workload", "mnist-cnn", "--optimizer", "lamb"], "unknown optimizer 'lamb'"),
        (["{tmp}/absent.py:build_model"], "absent.py: no such file"),
        (["{tmp}/absent.keras"], "absent.keras: no such file"),
        (["--workload", "vgg"], "unknown workload 'vgg'"),
        ([], "give one model"),
        (["--workload", "mnist-cnn", "--mixed-precision", "fp8"], "--mixed-precision 'fp8'; choose bf16"),
    ],
)
def test_bad_input_is_one_line_exit_2_nothing_written(
    capsys: pytest.CaptureFixture[str], script: Path, tmp_path: Path, args: list[str], line: str
) -> None:
    out_json = tmp_path / "out" / "e.json"
    out_json.parent.mkdir()
    argv = [a.format(script=script, tmp=tmp_path) for a in args]
    code, out, err = cli(capsys, "estimate", *argv, "--json", str(out_json))
    assert code == 2
    assert line in err and err.count("\n") == 1, err
    assert out == "" and not out_json.exists()


def test_train_flag_names(capsys: pytest.CaptureFixture[str]) -> None:
    """The batch and precision flags are named as tfdist train names them."""
    new = read_json(
        capsys, "--workload", "mnist-cnn", "--batch-size-per-replica", "16", "--mixed-precision", "bf16"
    )
    assert (new["batch_per_replica"], new["precision"]) == (16, "mixed_bfloat16")
