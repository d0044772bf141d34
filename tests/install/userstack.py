"""tfdist as users install it: a wheel built from this tree, installed into a virtualenv that already holds
the user's TensorFlow, run from a directory outside the checkout (so nothing imports from ``src/``).

The wheel is built once per test run (``pip wheel --no-deps``: the build backend of pyproject.toml, in
pip's isolated build environment). The virtualenvs are cached outside the repository
(``~/.cache/tfdist-tests/install-py3.X``): TensorFlow goes in once; a venv whose stamp names another wheel
gets only tfdist reinstalled, so a stale tfdist is never tested.
"""

from __future__ import annotations

import glob
import hashlib
import os
import shutil
import subprocess
import sys
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "tfdist-tests"
#: The user's TensorFlow, installed before tfdist (the ``cpu`` extra's pin in pyproject.toml).
USER_TF = "tensorflow-cpu==2.21.*"
#: The variables a user's shell would not have: this checkout's paths and virtualenv.
DROPPED = ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME", "PYTHONSTARTUP")


#: What the build reads: the project's metadata, its readme and the package sources.
BUILD_INPUTS = ("pyproject.toml", "README.md", "src")


def build_wheel(out: Path, timeout: float = 240) -> Path:
    """``pip wheel --no-deps`` of this checkout's sources into ``out`` (the copy built: ``out/source``);
    the wheel's path.

    Built from a copy: setuptools builds in the source tree and keeps ``build/lib`` between builds, so a
    module removed from ``src/`` would still ship, and two builds at once would share that directory.
    """
    source = out / "source"
    for name in BUILD_INPUTS:
        if (ROOT / name).is_dir():
            shutil.copytree(
                ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info")
            )
        else:
            source.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(out), str(source)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, f"pip wheel of {ROOT} failed: {(proc.stderr or proc.stdout)[-2000:]}"
    (wheel,) = glob.glob(str(out / "tfdist-*.whl"))
    return Path(wheel)


def wheel_digest(wheel: Path) -> str:
    """SHA-256 of the wheel's entries (names and bytes), not of the zip: two builds of one tree match even
    though the zip's timestamps differ."""
    digest = hashlib.sha256()
    with zipfile.ZipFile(wheel) as zf:
        for name in sorted(zf.namelist()):
            digest.update(name.encode() + b"\0" + zf.read(name) + b"\0")
    return digest.hexdigest()


def find_python(version: str) -> str | None:
    """An interpreter of ``version`` ("3.10") that runs: ``python3.10`` on PATH, else pyenv's own copy
    (pyenv's shims refuse a version that is not selected)."""
    candidates = [shutil.which(f"python{version}") or ""]
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    candidates += sorted(glob.glob(str(pyenv / f"{version}.*" / "bin" / f"python{version}")), reverse=True)
    for candidate in filter(None, candidates):
        try:
            ok = subprocess.run([candidate, "-c", "import venv"], capture_output=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if ok.returncode == 0:
            return candidate
    return None


@dataclass(frozen=True)
class UserVenv:
    """A user's virtualenv: its python, its ``tfdist`` command, and how long making it ready took."""

    python: Path
    tfdist: Path
    seconds_tf: float  # installing TensorFlow (0 when cached)
    seconds_tfdist: float  # installing the wheel with its extra (0 when cached)

    def env(self) -> dict[str, str]:
        """A user's environment: this venv's bin first on PATH, nothing of the checkout's."""
        env = {k: v for k, v in os.environ.items() if k not in DROPPED}
        env["PATH"] = os.pathsep.join([str(self.python.parent), env.get("PATH", "")])
        env.update(TF_CPP_MIN_LOG_LEVEL="2", TF_ENABLE_ONEDNN_OPTS="0")
        return env


def _pip(python: Path, *args: str, timeout: float) -> float:
    start = time.monotonic()
    cmd = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{' '.join(cmd)} failed: {(proc.stderr or proc.stdout)[-2000:]}"
    return time.monotonic() - start


def user_venv(python: str, wheel: Path, extra: str = "cpu,digits,plots") -> UserVenv:
    """The cached venv of ``python`` with the user's TensorFlow and this ``wheel`` (with ``extra``: the
    demo's digits and curves.png too)."""
    version = subprocess.run(
        [python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout.strip()
    venv = CACHE / f"install-py{version}"
    bin_python = venv / "bin" / "python"
    tf_stamp, wheel_stamp = venv / ".user-tf", venv / ".tfdist-wheel"
    seconds_tf = seconds_tfdist = 0.0
    if not (bin_python.exists() and tf_stamp.exists() and tf_stamp.read_text() == USER_TF):
        shutil.rmtree(venv, ignore_errors=True)
        CACHE.mkdir(parents=True, exist_ok=True)
        subprocess.run([python, "-m", "venv", str(venv)], check=True, timeout=120)
        seconds_tf = _pip(bin_python, USER_TF, timeout=900)
        tf_stamp.write_text(USER_TF)
    want = f"{wheel_digest(wheel)} [{extra}]"
    if not (wheel_stamp.exists() and wheel_stamp.read_text() == want):
        wheel_stamp.unlink(missing_ok=True)
        # The version does not change between builds: without --force-reinstall pip keeps the old tfdist.
        seconds_tfdist = _pip(bin_python, "--force-reinstall", "--no-deps", str(wheel), timeout=300)
        seconds_tfdist += _pip(bin_python, f"{wheel}[{extra}]", timeout=900)
        wheel_stamp.write_text(want)
    return UserVenv(bin_python, venv / "bin" / "tfdist", seconds_tf, seconds_tfdist)
