"""A cluster's own MPI: Debian's Open MPI with mpi4py built against it (scripts/openmpi-venv.sh), beside
the mpich wheel of the project venv. Ranks of each stack match one process; `tfdist launch` picks the
launcher of the library mpi4py loads; one MPI's launcher starting the other's ranks ends with one line.

Second tier: the first run installs Open MPI and builds mpi4py (minutes); later runs reuse the venv.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
HELPERS = ROOT / "tests" / "helpers"
SCRIPT = ROOT / "scripts" / "openmpi-venv.sh"
HYDRA = str(Path(sys.executable).parent / "mpiexec")  # the mpich wheel's launcher
MPIRUN = "mpirun.openmpi"  # Debian's name for Open MPI's (PATH's plain mpirun is whichever MPI it chose)
#: Open MPI refuses to start as root unless told (a container's usual user).
ROOT_OK = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}


@pytest.fixture(scope="module")
def openmpi_python() -> str:
    """The Python of the Open MPI venv (made on first use: apt-get and an mpi4py build, minutes)."""
    if os.geteuid() != 0 and not Path("/usr/bin/mpicc.openmpi").exists():
        pytest.skip("Open MPI is not installed and installing it needs root")
    proc = subprocess.run(["bash", str(SCRIPT), "create"], capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, proc.stderr[-3000:]
    path = subprocess.run(["bash", str(SCRIPT), "path"], capture_output=True, text=True, timeout=30)
    return str(Path(path.stdout.strip()) / "bin" / "python")


def run(argv: list[str], timeout: float = 300, **extra: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "TF_ENABLE_ONEDNN_OPTS": "0", **ROOT_OK, **extra}
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env)


def npz(path: Path) -> list[np.ndarray]:
    with np.load(path) as data:
        return [data[k] for k in sorted(data.files, key=lambda k: int(k.split("_")[1]))]


def max_diff(a: list[np.ndarray], b: list[np.ndarray]) -> float:
    return max(float(np.max(np.abs(x - y))) for x, y in zip(a, b, strict=True))


def test_the_open_mpi_venv_loads_open_mpi_and_picks_its_mpirun(openmpi_python: str) -> None:
    """`tfdist env` in each venv: the library mpi4py loads and the launcher chosen for it (PATH's mpirun
    is Open MPI's once it is installed; the project venv still gets the mpich wheel's Hydra)."""
    stacks = {}
    for name, python in (("openmpi", openmpi_python), ("mpich", sys.executable)):
        proc = run([python, "-m", "tfdist", "env", "--json"], timeout=120)
        assert proc.returncode == 0, proc.stderr[-2000:]
        stacks[name] = json.loads(proc.stdout)["mpi"]
    assert stacks["openmpi"]["library"]["name"].startswith("Open MPI 4.")
    assert stacks["openmpi"]["flavour"] == "openmpi" and "mpich" not in stacks["openmpi"]["launcher"]
    assert stacks["mpich"]["library"]["family"] == "mpich"
    assert stacks["mpich"]["flavour"] == "hydra" and stacks["mpich"]["launcher"] == HYDRA


def test_horovod_keras_script_under_open_mpis_mpirun_equals_one_process(
    openmpi_python: str, tmp_path: Path
) -> None:
    ranks, single = tmp_path / "ranks", tmp_path / "single"
    script = str(HELPERS / "hvd_keras.py")
    proc = run([MPIRUN, "-np", "2", openmpi_python, "-m", "mpi4py", script, str(ranks)])
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    one = run([sys.executable, script, str(single), "--batch", "64", "--lr-ranks", "2"])
    assert one.returncode == 0, one.stderr[-3000:]
    w0, w1 = npz(ranks / "rank0.npz"), npz(ranks / "rank1.npz")
    assert max_diff(w0, w1) == 0.0
    assert max_diff(w0, npz(single / "rank0.npz")) <= 1e-5
    h0, h1 = (json.loads((ranks / f"history-{r}.json").read_text()) for r in (0, 1))
    h_one = json.loads((single / "history-0.json").read_text())
    assert h0 == h1
    for name in ("loss", "accuracy"):
        assert np.allclose(h0[name], h_one[name], atol=1e-5), name


def _fit_matches_one_process(ranks: Path, single: Path) -> None:
    w0, w1 = np.load(ranks / "weights-0.npy"), np.load(ranks / "weights-1.npy")
    assert np.array_equal(w0, w1)
    assert np.max(np.abs(w0 - np.load(single / "weights-0.npy"))) <= 1e-5
    h0, h1 = (json.loads((ranks / f"history-{r}.json").read_text()) for r in (0, 1))
    h0["history"].pop("examples_per_sec"), h1["history"].pop("examples_per_sec")  # local timing
    assert h0 == h1 and h0["steps"] == 12
    one = json.loads((single / "history-0.json").read_text())["history"]
    for name, values in h0["history"].items():
        assert np.allclose(values, one[name], rtol=1e-4, atol=1e-6), (name, values, one[name])


@pytest.fixture(scope="module")
def one_process(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tfdist.fit in one process (fit_probe.py): what two ranks must match."""
    single = tmp_path_factory.mktemp("single")
    proc = run([sys.executable, str(HELPERS / "fit_probe.py"), str(single)])
    assert proc.returncode == 0, proc.stderr[-3000:]
    return single


def test_tfdist_fit_under_open_mpis_mpirun_equals_one_process(
    openmpi_python: str, one_process: Path, tmp_path: Path
) -> None:
    proc = run(
        [MPIRUN, "-np", "2", openmpi_python, "-m", "mpi4py", str(HELPERS / "fit_probe.py"), str(tmp_path)]
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    _fit_matches_one_process(tmp_path, one_process)


def test_tfdist_launch_in_the_open_mpi_venv_starts_open_mpis_mpirun(
    openmpi_python: str, one_process: Path, tmp_path: Path
) -> None:
    """Hydra's mpiexec (the project venv's) is not on PATH here, but Open MPI's mpirun is, and a plain
    `mpiexec` could be either MPI's: the launch must take the one of the library mpi4py loads."""
    out, run_dir = tmp_path / "out", tmp_path / "run"
    out.mkdir()
    argv = [openmpi_python, "-m", "tfdist", "launch", "--backend", "mpi", "-n", "2", "--cpu"]
    proc = run([*argv, "--run-dir", str(run_dir), str(HELPERS / "fit_probe.py"), str(out)])
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    _fit_matches_one_process(out, one_process)
    log = (run_dir / "attempt-0" / "mpi.log").read_text()
    assert "[1,0]<std" in log, log[-2000:]  # lines tagged by Open MPI's mpirun (--tag-output), not Hydra


@pytest.mark.parametrize(
    ("stack", "library", "launcher"),
    [
        ("mpich wheel under Open MPI's mpirun", "MPICH", "Open MPI's mpirun (OMPI_COMM_WORLD_SIZE=2)"),
        ("Open MPI under Hydra", "Open MPI 4.", "MPICH's Hydra (mpiexec) (PMI_SIZE=2)"),
    ],
)
def test_one_mpis_launcher_starting_the_others_ranks_ends_with_one_line(
    openmpi_python: str, stack: str, library: str, launcher: str, tmp_path: Path
) -> None:
    """The Horovod Keras script, started by hand by the wrong launcher: every rank ends before MPI_Init
    with exit code 2 and the job gets one line (not MPICH's abort, not two lone trainings)."""
    script = [str(HELPERS / "hvd_keras.py"), str(tmp_path)]
    if stack.startswith("mpich"):
        argv = [MPIRUN, "-np", "2", sys.executable, *script]
    else:
        argv = [HYDRA, "-n", "2", openmpi_python, *script]
    started = time.monotonic()
    proc = run(argv, timeout=120)
    took = time.monotonic() - started
    assert proc.returncode == 2, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = [line for line in proc.stderr.splitlines() if line.startswith("ConfigError:")]
    assert len(lines) == 1, proc.stderr[-3000:]  # the first rank's line, for the job; every rank exits 2
    assert f"mpi4py here uses {library}" in lines[0] and f"started by {launcher}" in lines[0]
    assert "Hint: start it with" in lines[0]
    assert "unsupported PMI version" not in proc.stderr
    assert not list(tmp_path.glob("rank*.npz"))  # nothing trained
    assert took < 60
