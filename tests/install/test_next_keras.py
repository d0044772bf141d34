"""The next Keras release, from its nightly (``keras-nightly`` beside TensorFlow 2.21, and beside
``tf-nightly-cpu``): the tutorial-style ``model.fit`` script on 2 workers equals one process (weights,
history, ``evaluate()``, ``predict()``), through ``devtools/compat.py``'s own cells (cached venvs under
~/.cache/tfdist-compat, built when missing, tfdist installed editable from this tree), so a change on
Keras' main shows here the week its nightly reaches the registry. Building the venvs needs the registry;
without one the test fails naming the pip command."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.parametrize("cell", ["tf2.21-keras3.16", "tf2.22-keras3.16"])
def test_model_fit_on_the_next_keras_equals_one_process(cell: str, tmp_path: Path) -> None:
    out = tmp_path / "compat.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "devtools" / "compat.py"), "--cells", cell, "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert out.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    (record,) = json.loads(out.read_text())["cells"]
    assert record["passed"] and proc.returncode == 0, record
    assert record["keras_dist"] == "keras-nightly" and record["max_diff"] <= 1e-5
