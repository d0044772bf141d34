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

import pytest

from install.userstack import ROOT, find_python, user_venv

PACKAGE = ROOT / "src" / "tfdist"
#: The Pythons requires-python admits (">=3.10"), each with a TensorFlow 2.21 wheel in the registry.
PYTHONS = ("3.10", "3.11", "3.12")


def _metadata(zf: zipfile.ZipFile) -> dict[str, list[str]]:
    (name,) = [n for n in zf.namelist() if n.endswith(".dist-info/METADATA")]
    message = Parser().parsestr(zf.read(name).decode())
    return {key: message.get_all(key) or [] for key in ("Requires-Python", "Provides-Extra", "Requires-Dist")}


def test_the_wheel_holds_every_file_of_the_package(wheel: Path) -> None:
    """Every file under src/tfdist (modules, the worker's sitecustomize, py.typed, any data) is in the
    wheel, and the ``tfdist`` command is declared: a file left out fails only once installed."""
    tree = {
        str(path.relative_to(PACKAGE.parent))
        for path in PACKAGE.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc"
    }
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        (entry_points,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
        scripts = zf.read(entry_points).decode()
        meta = _metadata(zf)
    assert not tree - names, f"missing from {wheel.name}: {sorted(tree - names)}"
    assert {"tfdist/py.typed", "tfdist/worker/boot/sitecustomize.py"} <= names
    assert "tfdist = tfdist.cli:main" in scripts
    assert meta["Requires-Python"] == [">=3.10"]
    assert {"cpu", "gpu", "mpi", "ray", "k8s", "data"} <= set(meta["Provides-Extra"])
    assert any(r.startswith("tensorflow-cpu") and "extra == " in r for r in meta["Requires-Dist"])


def _python(version: str) -> str:
    if sys.version_info[:2] == tuple(int(p) for p in version.split(".")):
        return sys.executable
    found = find_python(version)
    if found is None:
        pytest.skip(f"no python{version} on this machine (PATH or pyenv)")
    return found


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
    env, cwd = venv.env(), tmp_path
    where = subprocess.run(
        [str(venv.python), "-c", "import sys, tfdist; print(sys.version_info[:2], tfdist.__file__)"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert where.returncode == 0, where.stderr
    assert str(venv.python.parent.parent) in where.stdout and str(ROOT) not in where.stdout, where.stdout
    assert f"({version.replace('.', ', ')})" in where.stdout, where.stdout

    run = tmp_path / "run"
    argv = [str(venv.tfdist), "train", "--workers", "2", "--dataset", "digits", "--workload", "mnist-cnn"]
    argv += ["--epochs", "1", "--output-dir", str(run)]
    began = time.monotonic()
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    demo = time.monotonic() - began
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    assert "Traceback" not in proc.stdout + proc.stderr
    config = json.loads((run / "train.json").read_text())
    assert config["epochs"] == 1
    assert (run / "model.keras").stat().st_size > 0, sorted(p.name for p in run.iterdir())

    # tfdist env on this stack: the fix covers its Keras; the MPI backend and Ray wait for their extras.
    shown = subprocess.run(
        [str(venv.tfdist), "env", "--json"], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )
    assert shown.returncode == 0, shown.stderr[-2000:]
    stack = json.loads(shown.stdout)["stack"]
    works = {f["name"].split(" (")[0]: f["works"] for f in stack["features"]}
    assert works["model.fit under MultiWorkerMirroredStrategy"], stack["features"]
    assert stack["keras_fix"].startswith("covers Keras 3.1"), stack["keras_fix"]
    assert not works["MPI backend"] and not works["Ray"] and not works["GPU"]
    assert {"mpi", "ray", "gpu"} <= set(stack["missing_extras"]), stack["missing_extras"]
    # Measured times, shown with -s (a second run reuses the cached venv: 0 s of installing).
    print(
        f"python {version}: TensorFlow install {venv.seconds_tf:.0f} s, tfdist wheel install "
        f"{venv.seconds_tfdist:.0f} s, venv ready {ready:.0f} s, demo (1 epoch, 2 workers) {demo:.0f} s"
    )
