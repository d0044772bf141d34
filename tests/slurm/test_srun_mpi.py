"""Ranks that ``srun`` starts itself, as an HPC guide's job script does (``srun --mpi=pmi2 python train.py``,
no tfdist launcher): a Horovod-API script and ``--backend mpi`` ranks each equal one process; under
``--mpi=pmix`` the ``mpich`` wheel's ranks end with tfdist's one line, and a Open MPI build of mpi4py
(scripts/openmpi-venv.sh) equals one process.

A single-node Slurm of its own (scripts/slurm-local.sh, its own directory and ports, so another run's
cluster is not disturbed), declared with 8 CPUs: 2 tasks fit on one node.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
HELPERS = ROOT / "tests" / "helpers"
CLUSTER_ENV = {"TFDIST_SLURM_DIR": "/tmp/tfdist-slurm-srunmpi", "TFDIST_SLURM_PORT": "16937"}
OPENMPI_VENV = ROOT / "scripts" / "openmpi-venv.sh"


@pytest.fixture(scope="module")
def slurm_conf() -> Iterator[str]:
    script = str(ROOT / "scripts" / "slurm-local.sh")
    env = {**os.environ, **CLUSTER_ENV}
    started = subprocess.run([script, "start"], env=env, capture_output=True, text=True, timeout=900)
    assert started.returncode == 0, started.stderr[-3000:]
    yield os.path.join(CLUSTER_ENV["TFDIST_SLURM_DIR"], "slurm.conf")
    for record in Path(CLUSTER_ENV["TFDIST_SLURM_DIR"]).glob("*.run.pid"):
        try:
            os.kill(int(record.read_text()), signal.SIGKILL)
        except (ValueError, OSError):
            continue
    subprocess.run([script, "stop"], env=env, capture_output=True, timeout=120)


def srun(conf: str, mpi: str, python: str, *argv: str | Path, **env: str) -> subprocess.CompletedProcess[str]:
    """``srun -n 2 --mpi=MPI PYTHON ARGV`` on the test cluster, as a user's job script runs it (srun's
    exit code: the highest of the tasks')."""
    environ = {**os.environ, "SLURM_CONF": conf, "TF_CPP_MIN_LOG_LEVEL": "2", "TF_ENABLE_ONEDNN_OPTS": "0"}
    cmd = ["srun", "-n", "2", f"--mpi={mpi}", python, *map(str, argv)]
    return subprocess.run(cmd, env={**environ, **env}, capture_output=True, text=True, timeout=300)


def npz(path: Path) -> list[np.ndarray]:
    with np.load(path) as data:
        return [data[k] for k in data.files]


def max_diff(a: list[np.ndarray], b: list[np.ndarray]) -> float:
    return max(float(np.max(np.abs(x - y))) for x, y in zip(a, b, strict=True))


def test_mpi_plugins_of_the_test_slurm(slurm_conf: str) -> None:
    listed = subprocess.run(
        ["srun", "--mpi=list"], env={**os.environ, "SLURM_CONF": slurm_conf}, capture_output=True, text=True
    )
    assert {"pmi2", "pmix"} <= set((listed.stdout + listed.stderr).split()), listed.stderr


def test_a_horovod_api_script_under_srun_pmi2_equals_one_process(
    slurm_conf: str, one_process_reference: Callable[..., Path], tmp_path: Path
) -> None:
    script = HELPERS / "hvd_loop.py"
    single = one_process_reference(script, "--batch", "64")
    proc = srun(slurm_conf, "pmi2", sys.executable, script, tmp_path)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    w0, w1 = npz(tmp_path / "rank0.npz"), npz(tmp_path / "rank1.npz")
    assert max_diff(w0, w1) == 0.0
    assert max_diff(w0, npz(single / "rank0.npz")) <= 1e-5


def test_mpi_backend_ranks_under_srun_pmi2_equal_one_process(
    slurm_conf: str, one_process_reference: Callable[..., Path], tmp_path: Path
) -> None:
    probe = HELPERS / "fit_probe.py"
    single = one_process_reference(probe)
    proc = srun(slurm_conf, "pmi2", sys.executable, probe, tmp_path, TFDIST_BACKEND="mpi")
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-3000:]
    assert "2 rank(s) in 1 group(s) of 2 (local size 2, cross size 1)" in output, output[-3000:]
    reference = np.load(single / "weights-0.npy")
    for rank in (0, 1):
        assert float(np.max(np.abs(np.load(tmp_path / f"weights-{rank}.npy") - reference))) <= 1e-5, rank


def test_the_mpich_wheel_under_srun_pmix_ends_with_one_line(slurm_conf: str, tmp_path: Path) -> None:
    """MPICH without PMIx cannot hear srun's PMIx: each rank stops before MPI_Init (MPICH itself would abort
    there), the job with one line from its first rank, naming srun --mpi=pmi2."""
    proc = srun(slurm_conf, "pmix", sys.executable, HELPERS / "hvd_loop.py", tmp_path)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 2, output[-3000:]
    lines = [line.strip() for line in output.splitlines() if "which that library cannot hear" in line]
    assert len(lines) == 1, output[-3000:]  # one line for the job, not one per rank
    (line,) = lines
    assert "started by srun --mpi=pmix" in line and "Hint: srun --mpi=pmi2" in line, line
    assert "Traceback" not in output and "unsupported PMI version" not in output
    assert not list(tmp_path.glob("rank*.npz"))


@pytest.fixture(scope="module")
def openmpi_python() -> str:
    """The Python of the Open MPI venv (made on first use: apt-get and an mpi4py build, minutes)."""
    if os.geteuid() != 0 and not Path("/usr/bin/mpicc.openmpi").exists():
        pytest.skip("Open MPI is not installed and installing it needs root")
    made = subprocess.run(["bash", str(OPENMPI_VENV), "create"], capture_output=True, text=True, timeout=1500)
    assert made.returncode == 0, made.stderr[-3000:]
    path = subprocess.run(["bash", str(OPENMPI_VENV), "path"], capture_output=True, text=True, timeout=30)
    return str(Path(path.stdout.strip()) / "bin" / "python")


def test_a_horovod_api_script_on_open_mpi_under_srun_pmix_equals_one_process(
    slurm_conf: str, openmpi_python: str, one_process_reference: Callable[..., Path], tmp_path: Path
) -> None:
    script = HELPERS / "hvd_loop.py"
    single = one_process_reference(script, "--batch", "64")
    proc = srun(slurm_conf, "pmix", openmpi_python, script, tmp_path)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    w0, w1 = npz(tmp_path / "rank0.npz"), npz(tmp_path / "rank1.npz")
    assert max_diff(w0, w1) == 0.0
    assert max_diff(w0, npz(single / "rank0.npz")) <= 1e-5
