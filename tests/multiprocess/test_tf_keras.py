"""Keras 2 as users keep it on TensorFlow 2.16+ (the tf-keras package, ``TF_USE_LEGACY_KERAS=1``): a
tf.keras script under tfdist -- ``tfdist.fit``, ``model.fit`` under ``tfdist.strategy()``, Horovod's Keras
API -- on 2 workers equals one process (1e-5)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

SCRIPT = Path(__file__).parents[1] / "helpers" / "tfkeras_fit.py"
#: tf-keras pins the full `tensorflow` package, which would replace tensorflow-cpu: it is installed without
#: its dependencies into a directory of its own, put on PYTHONPATH for these processes only.
TF_KERAS = "tf-keras==2.21.0"
TARGET = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "tfdist-tests" / "tf-keras-2.21"


@pytest.fixture(scope="module")
def keras2_env() -> dict[str, str]:
    """The environment of a tf.keras (Keras 2) process; tf-keras installed on first use."""
    if not (TARGET / "tf_keras").is_dir():
        installed = subprocess.run(
            [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(TARGET), TF_KERAS],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert installed.returncode == 0, f"could not install {TF_KERAS}: {installed.stderr[-2000:]}"
    path = os.pathsep.join(p for p in (str(TARGET), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path, "TF_USE_LEGACY_KERAS": "1", "TF_ENABLE_ONEDNN_OPTS": "0"}


def run(argv: list[str], env: dict[str, str]) -> None:
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]


@pytest.mark.parametrize(
    ("mode", "backend"),
    [
        pytest.param("horovod", "horovod", id="horovod-keras"),
        pytest.param("horovod-accumulate", "horovod", id="horovod-keras-accumulate", marks=pytest.mark.slow),
        pytest.param("tfdist-fit", "tf", id="tfdist-fit-tf", marks=pytest.mark.slow),
        pytest.param("tfdist-fit", "mpi", id="tfdist-fit-mpi", marks=pytest.mark.slow),
        pytest.param("model-fit", "tf", id="model-fit-tf", marks=pytest.mark.slow),
    ],
)
def test_a_tf_keras_script_on_two_workers_equals_one_process(
    tmp_path: Path, keras2_env: dict[str, str], mode: str, backend: str
) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir()
    two.mkdir()
    run([sys.executable, str(SCRIPT), str(one), mode], {**keras2_env, "TFDIST_RANK": "0"})
    launch = [sys.executable, "-m", "tfdist", "launch", "-n", "2", "--cpu", "--backend", backend]
    run([*launch, "--run-dir", str(tmp_path / "run"), str(SCRIPT), str(two), mode], keras2_env)
    reference = np.load(one / "weights-0.npy")
    for rank in (0, 1):
        assert float(np.abs(np.load(two / f"weights-{rank}.npy") - reference).max()) <= 1e-5, rank
