"""tfdist.fit in one process and on 2 workers keeps model.fit's promises, compared with Keras' own model.fit
in ONE process: per-batch hooks (a per-step learning-rate schedule and a logger: the same calls with the
same logs), a stop from a batch hook (every worker stops at the same step), a partial last batch (1,000
examples, global batch 64), class_weight, validation_split, initial_epoch, validation_freq /
validation_steps, and the test / predict hooks of evaluate and predict."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from helpers.cli import TFDIST

SCRIPT = str(Path(__file__).parent.parent / "helpers" / "fit_parity.py")
SCENARIOS = (
    "partial_arrays",
    "partial_dataset",
    "batch_hooks",
    "stop_in_batch",
    "stop_on_one_worker",
    "class_weight",
    "validation_split",
    "initial_epoch",
    "validation_freq_steps",
    "inference",  # tfdist.evaluate / tfdist.predict with Keras' test and predict hooks
)
TOL = 1e-5


def run(cmd: list[str], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run([*cmd, SCRIPT, str(out)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]


def load(out: Path, name: str, rank: int) -> tuple[np.ndarray, dict]:
    weights = np.load(out / f"{name}.rank-{rank}.weights.npy")
    return weights, json.loads((out / f"{name}.rank-{rank}.json").read_text())


@pytest.fixture(scope="module")
def keras_reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("keras")
    proc = subprocess.run(
        [sys.executable, SCRIPT, str(out), "--keras"], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


def assert_events_match(expected: list, got: list, name: str) -> None:
    """The same hooks, in the same order, for the same batches, with the same logs and rates."""
    assert [e[:2] for e in got] == [e[:2] for e in expected], name
    for want, have in zip(expected, got, strict=True):
        if isinstance(want[2], dict):
            assert have[2].keys() == want[2].keys(), (name, want[:2])
            for key, value in want[2].items():
                assert abs(have[2][key] - value) <= TOL, (name, want[:2], key)
        else:
            assert abs(have[2] - want[2]) <= TOL, (name, want[:2])


# In one process (no launcher) in the second tier: the first tier's one-process tfdist.fit ≡ model.fit is
# test_fit_like_keras.py; here both backends' workers.
# The first tier: test_keras_fit.py's model.fit script on 2 workers, test_mpi_backend.py's ranks.
@pytest.mark.parametrize(
    "backend", [pytest.param(b, marks=pytest.mark.slow) for b in ("one-process", "tf", "mpi")]
)
def test_two_workers_equal_one_process_model_fit(backend: str, keras_reference: Path, tmp_path: Path) -> None:
    """2 workers on the TF and MPI backends, and tfdist.fit in one process (no launcher)."""
    workers = 1 if backend == "one-process" else 2
    if workers == 1:
        run([sys.executable], tmp_path / "out")
    else:
        launch = [*TFDIST, "launch", "-n", "2", "--cpu", "--backend", backend]
        run([*launch, "--run-dir", str(tmp_path / "logs")], tmp_path / "out")
    for name in SCENARIOS:
        w_ref, ref = load(keras_reference, name, 0)
        for rank in range(workers):
            w, got = load(tmp_path / "out", name, rank)
            np.testing.assert_allclose(w, w_ref, atol=TOL, rtol=0, err_msg=name)
            assert got["epochs"] == ref["epochs"], name
            assert got["iterations"] == ref["iterations"], name  # the same steps, a partial batch included
            if ref["history"]:  # (the inference scenario trains nothing)
                assert set(got["history"]) == {*ref["history"], "examples_per_sec"}, name
            for key, values in ref["history"].items():
                np.testing.assert_allclose(
                    got["history"][key], values, atol=TOL, rtol=0, err_msg=f"{name} {key}"
                )
            if "events" in ref:
                assert_events_match(ref["events"], got["events"], name)
    # Keras stopped at epoch 2, batch 5 (a 16-batch epoch): so did both workers, also when only rank 0's
    # callback asked for it.
    for name in ("stop_in_batch", "stop_on_one_worker"):
        assert load(keras_reference, name, 0)[1]["iterations"] == 16 + 5
