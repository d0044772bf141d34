"""The wheel users install: it holds every file the package runs from, and installed into a venv that
already has the user's TensorFlow it runs the demo (``tfdist train --workers 2`` on the embedded digits)
from a directory outside the checkout, on every Python that pyproject.toml's requires-python admits and
this machine has."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import zipfile
from email.parser import Parser
from pathlib import Path

import numpy as np
import pytest

from install.userstack import ROOT, UserVenv, find_python, user_venv

KERAS_FIT = ROOT / "tests" / "helpers" / "keras_fit.py"
#: The Pythons requires-python admits (">=3.10"), each with a TensorFlow 2.21 wheel in the registry.
PYTHONS = ("3.10", "3.11", "3.12", "3.13")


def _metadata(zf: zipfile.ZipFile) -> dict[str, list[str]]:
    (name,) = [n for n in zf.namelist() if n.endswith(".dist-info/METADATA")]
    message = Parser().parsestr(zf.read(name).decode())
    return {
        key: message.get_all(key) or []
        for key in ("Requires-Python", "Provides-Extra", "Requires-Dist", "Classifier")
    }


def test_the_wheel_holds_every_file_of_the_package(wheel: Path) -> None:
    """Every file under src/tfdist (modules, the worker's sitecustomize, py.typed, any data) is in the
    wheel, and the ``tfdist`` command is declared: a file left out fails only once installed."""
    # The copy the wheel was built from (userstack.build_wheel): src/ itself may change meanwhile.
    package = wheel.parent / "source" / "src" / "tfdist"
    assert (package / "__init__.py").is_file()
    tree = {
        str(path.relative_to(package.parent))
        for path in package.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc"
    }
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        (entry_points,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
        scripts = zf.read(entry_points).decode()
        meta = _metadata(zf)
    assert not tree - names, f"missing from {wheel.name}: {sorted(tree - names)}"
    stray = {n for n in names - tree if not n.split("/")[0].endswith(".dist-info")}
    assert not stray, f"in {wheel.name} but not in src/: {sorted(stray)}"
    assert {"tfdist/py.typed", "tfdist/worker/boot/sitecustomize.py"} <= names
    assert "tfdist = tfdist.cli:main" in scripts
    assert meta["Requires-Python"] == [">=3.10"]
    assert [c.rsplit(" ", 1)[-1] for c in meta["Classifier"] if "Python :: 3." in c] == list(PYTHONS)
    assert {"cpu", "gpu", "mpi", "ray", "k8s", "data", "digits", "plots"} <= set(meta["Provides-Extra"])
    # The core is what every command needs; scikit-learn, matplotlib and PyYAML come with their extras.
    core = {r.split(">")[0].split(";")[0].strip() for r in meta["Requires-Dist"] if "extra ==" not in r}
    assert core == {"numpy", "rich", "psutil", "tomli"}, core
    assert any(r.startswith("tensorflow-cpu") and "extra == " in r for r in meta["Requires-Dist"])


def _python(version: str) -> str:
    if sys.version_info[:2] == tuple(int(p) for p in version.split(".")):
        return sys.executable
    found = find_python(version)
    if found is None:
        pytest.skip(f"no python{version} on this machine (PATH or pyenv)")
    return found


def _run(venv: UserVenv, cwd: Path, *argv: str | Path, timeout: float = 300) -> str:
    """``argv`` as a user of ``venv`` runs it from ``cwd``: its output; the test fails on an exit code."""
    proc = subprocess.run(
        [str(a) for a in argv], cwd=cwd, env=venv.env(), capture_output=True, text=True, timeout=timeout
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"{' '.join(map(str, argv))}: exit {proc.returncode}\n{output[-3000:]}"
    return output


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("version", PYTHONS)
def test_the_installed_wheel_runs_the_demo_outside_the_checkout(
    wheel: Path, tmp_path: Path, version: str
) -> None:
    start = time.monotonic()
    venv = user_venv(_python(version), wheel)
    ready = time.monotonic() - start
    where = _run(
        venv, tmp_path, venv.python, "-c", "import sys, tfdist; print(sys.version_info[:2], tfdist.__file__)"
    )
    assert str(venv.python.parent.parent) in where and str(ROOT) not in where, where
    assert f"({version.replace('.', ', ')})" in where, where

    run = tmp_path / "run"
    began = time.monotonic()
    demo = ["train", "--workers", "2", "--dataset", "digits", "--workload", "mnist-cnn", "--epochs", "1"]
    output = _run(venv, tmp_path, venv.tfdist, *demo, "--run-dir", run, timeout=600)
    demo_s = time.monotonic() - began
    assert "Traceback" not in output
    assert json.loads((run / "train.json").read_text())["epochs"] == 1
    assert (run / "model.keras").stat().st_size > 0, sorted(p.name for p in run.iterdir())

    # A user's tutorial script (MultiWorkerMirroredStrategy + model.fit, no tfdist import) on 2 workers
    # equals one process, on the Keras pip chose for this Python (3.12 on 3.10: Keras 3.13+ needs 3.11).
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir()
    two.mkdir()
    _run(venv, tmp_path, venv.python, KERAS_FIT, one)
    _run(
        venv,
        tmp_path,
        venv.tfdist,
        "launch",
        "-n",
        "2",
        "--cpu",
        "--run-dir",
        tmp_path / "logs",
        KERAS_FIT,
        two,
    )
    want = np.load(one / "rank-0.weights.npy")
    for rank in (0, 1):
        assert float(np.abs(np.load(two / f"rank-{rank}.weights.npy") - want).max()) <= 1e-5, rank

    # tfdist env on this stack: the fix covers its Keras; the MPI backend and Ray wait for their extras.
    stack = json.loads(_run(venv, tmp_path, venv.tfdist, "env", "--json", timeout=120))["stack"]
    works = {f["name"].split(" (")[0]: f["works"] for f in stack["features"]}
    assert works["model.fit under MultiWorkerMirroredStrategy"], stack["features"]
    assert stack["keras_fix"].startswith("covers Keras 3.1"), stack["keras_fix"]
    assert not works["MPI backend"] and not works["Ray"] and not works["GPU"]
    missing = stack["missing_extras"]
    assert {"mpi", "ray"} <= set(missing) and not {"cpu", "gpu"} & set(missing), missing
    keras = stack["found"]["keras"]
    # Measured times, shown with -s (a second run reuses the cached venv: 0 s of installing).
    print(
        f"python {version} (Keras {keras}): TensorFlow install {venv.seconds_tf:.0f} s, tfdist wheel install "
        f"{venv.seconds_tfdist:.0f} s, venv ready {ready:.0f} s, demo (1 epoch, 2 workers) {demo_s:.0f} s"
    )


@pytest.mark.slow
@pytest.mark.parametrize("version", PYTHONS)  # 3.10 reads TOML with tomli, the later ones with tomllib
def test_a_slurm_config_file_is_read_on_every_python(wheel: Path, tmp_path: Path, version: str) -> None:
    venv = user_venv(_python(version), wheel)
    (tmp_path / "job.toml").write_text("nodes = 2\nntasks-per-node = 1\n")
    script = _run(venv, tmp_path, venv.tfdist, "slurm", "script", "--config", "job.toml", "train.py")
    assert "#SBATCH --nodes=2" in script, script
