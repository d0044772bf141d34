"""A stack whose Keras is outside the fix's table (TensorFlow 2.17 with Keras 3.2, which pip allows): a
script calling ``model.fit`` under MultiWorkerMirroredStrategy on 2 workers gets tfdist's one line once
for the job (the chief's; the other worker ends with the same error, recorded, unprinted), and a script
that never calls ``model.fit`` gets nothing at all.

The venv is ``devtools/compat.py``'s cell for that stack (cached under ~/.cache/tfdist-compat, built when
missing, tfdist installed editable from this tree): building it needs the package registry; without one
the test fails naming the pip command, as a skip would hide that the stack went untested.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[2] / "devtools"))
import compat

sys.path.pop(0)

CELL = next(c for c in compat.CELLS if c.expect == "refused")
HELPERS = Path(__file__).parents[1] / "helpers"
LINE = "is outside the releases tfdist's model.fit fix supports"


@pytest.fixture(scope="module")
def python() -> Path:
    try:
        return compat.build(CELL, timeout=900)
    except (RuntimeError, subprocess.SubprocessError) as exc:
        pytest.fail(f"{CELL.name}: {exc}")


def launch(python: Path, tmp_path: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "TF_CONFIG")}
    env.update(compat.ENV)
    cmd = [str(python), "-m", "tfdist", "launch", "-n", "2", "--cpu", "--run-dir", str(tmp_path / "logs")]
    return subprocess.run([*cmd, *argv], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
@pytest.mark.multiprocess
def test_model_fit_on_a_keras_outside_the_table_gets_one_line_for_the_job(
    python: Path, tmp_path: Path
) -> None:
    (tmp_path / "out").mkdir()
    proc = launch(python, tmp_path, str(HELPERS / "keras_fit.py"), str(tmp_path / "out"))
    output = proc.stdout + proc.stderr
    assert proc.returncode == 2, output[-3000:]
    assert "Traceback" not in output
    from_workers = [line for line in output.splitlines() if LINE in line and line.startswith("[w")]
    # The chief's line, unless the other worker's same error ended the job first (the launcher then keeps
    # the chief's later output off the console): the job's line is the last one either way.
    assert len(from_workers) <= 1 and all(w.startswith("[w0]: ConfigError: Keras 3.2") for w in from_workers)
    assert output.splitlines()[-1].startswith("tfdist launch: error: ConfigError: Keras 3.2"), output
    # The other worker ended with the same error: recorded for the launcher, not printed in its log.
    attempt = tmp_path / "logs" / "attempt-0"
    assert LINE in (attempt / "rank1.error.json").read_text()
    assert LINE not in (attempt / "worker1.log").read_text()
    assert LINE in (attempt / "worker0.log").read_text()


@pytest.mark.slow
@pytest.mark.multiprocess
def test_a_script_that_never_calls_model_fit_gets_no_keras_line(python: Path, tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    proc = launch(python, tmp_path, str(HELPERS / "plain_mwms.py"), str(tmp_path / "out"))
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-3000:]
    assert LINE not in output and "ConfigError" not in output, output
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["weights-0.npy", "weights-1.npy"]
