"""tfdist.fit takes what model.fit takes — a `.batch(N)` pipeline with sample weights, an unbuilt model,
string / object / custom metrics and weighted_metrics — and gives Keras' own numbers, on any backend."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from helpers.cli import TFDIST

SCRIPT = str(Path(__file__).parent.parent / "helpers" / "fit_any.py")
TOL = 1e-5


def run(cmd: list[str], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run([*cmd, SCRIPT, str(out)], capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]


def load(out: Path, rank: int) -> tuple[np.ndarray, dict]:
    return np.load(out / f"rank-{rank}.weights.npy"), json.loads((out / f"rank-{rank}.json").read_text())


@pytest.fixture(scope="module")
def keras_reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("keras")
    out.mkdir(exist_ok=True)
    proc = subprocess.run(
        [sys.executable, SCRIPT, str(out), "--keras"], capture_output=True, text=True, timeout=240
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


def assert_matches_keras(reference: Path, out: Path, rank: int) -> None:
    w_ref, ref = load(reference, 0)
    w, got = load(out, rank)
    np.testing.assert_allclose(w, w_ref, atol=TOL, rtol=0)
    for key, values in ref["history"].items():  # loss, accuracy, top2, margin, weighted_accuracy, val_*
        np.testing.assert_allclose(got["history"][key], values, atol=TOL, rtol=0, err_msg=key)
    # tfdist.evaluate / tfdist.predict on 100 examples (batches of 48, 48 and 4) vs Keras' own
    assert got["evaluate"].keys() == ref["evaluate"].keys()
    for key, value in ref["evaluate"].items():
        assert abs(got["evaluate"][key] - value) <= TOL, key
    predictions, expected = (
        np.load(d / f"rank-{r}.predictions.npy") for d, r in ((out, rank), (reference, 0))
    )
    assert predictions.shape == expected.shape == (100, 3)
    np.testing.assert_allclose(predictions, expected, atol=TOL, rtol=0)


def test_one_process_equals_keras_model_fit(keras_reference: Path, tmp_path: Path) -> None:
    run([sys.executable], tmp_path)
    assert_matches_keras(keras_reference, tmp_path, 0)
    _, got = load(tmp_path, 0)
    for key, value in got["keras_evaluate"].items():  # Keras' evaluation of the final weights
        assert abs(got["history"][f"val_{key}"][-1] - value) <= TOL, key


@pytest.mark.slow  # the CI tier keeps its time budget; ./dev test --all runs it
@pytest.mark.parametrize("backend", ["tf", "mpi"])
def test_two_workers_equal_keras_model_fit_in_one_process(
    backend: str, keras_reference: Path, tmp_path: Path
) -> None:
    launch = [*TFDIST, "launch", "-n", "2", "--cpu", "--backend", backend]
    run([*launch, "--run-dir", str(tmp_path / "logs")], tmp_path / "out")
    for rank in range(2):
        assert_matches_keras(keras_reference, tmp_path / "out", rank)
