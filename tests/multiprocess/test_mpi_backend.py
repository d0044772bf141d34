"""The MPI backend: ranks started by `tfdist launch --backend mpi` (MPICH's mpiexec from the mpich wheel)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from helpers.cli import tfdist

PROBE = str(Path(__file__).parent.parent / "helpers" / "fit_probe.py")
HAVE_HOROVOD = importlib.util.find_spec("horovod") is not None


def launch(
    *args: str, timeout: float = 300, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return tfdist("launch", *args, env=env, timeout=timeout)


def two_ranks(backend: str, out: Path) -> Path:
    """fit_probe.py with its defaults on 2 ranks of ``backend``, uninterrupted."""
    out.mkdir()
    proc = launch("--backend", backend, "-n", "2", "--cpu", "--run-dir", str(out / "run"), PROBE, str(out))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out


@pytest.fixture(scope="module")
def mpi_ranks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The MPI backend's uninterrupted run (one for the module: the resume test's reference too)."""
    return two_ranks("mpi", tmp_path_factory.mktemp("mpi") / "ranks")


@pytest.mark.parametrize(
    "backend",
    [
        "mpi",
        pytest.param(
            "horovod",
            marks=pytest.mark.skipif(
                not HAVE_HOROVOD, reason="Horovod is not installed (it does not build against TF 2.21)"
            ),
        ),
    ],
)
def test_two_ranks_match_one_process(
    backend: str, one_process_reference: Callable[..., Path], request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    single = one_process_reference(PROBE)
    mpi = request.getfixturevalue("mpi_ranks") if backend == "mpi" else two_ranks(backend, tmp_path / "ranks")
    w0, w1 = np.load(mpi / "weights-0.npy"), np.load(mpi / "weights-1.npy")
    assert np.array_equal(w0, w1)
    assert np.max(np.abs(w0 - np.load(single / "weights-0.npy"))) <= 1e-5
    h0, h1 = (json.loads((mpi / f"history-{r}.json").read_text()) for r in (0, 1))
    h0["history"].pop("examples_per_sec"), h1["history"].pop("examples_per_sec")  # local timing
    assert h0 == h1 and h0["steps"] == 12
    # Metrics are summed in the same all-reduce as the gradients: they must equal the single process's.
    one = json.loads((single / "history-0.json").read_text())["history"]
    for name, values in h0["history"].items():
        assert np.allclose(values, one[name], rtol=1e-4, atol=1e-6), (name, values, one[name])


def test_a_dying_rank_ends_the_job_without_a_hang(tmp_path: Path) -> None:
    script = tmp_path / "die.py"
    script.write_text(
        "import sys, time\nfrom mpi4py import MPI\ncomm = MPI.COMM_WORLD\n"
        "if comm.Get_rank() == 1:\n    time.sleep(1); sys.exit(5)\ncomm.Barrier()\n"
    )
    started = time.monotonic()
    proc = launch(
        "--backend",
        "mpi",
        "-n",
        "2",
        "--cpu",
        "--grace",
        "2",
        "--run-dir",
        str(tmp_path / "run"),
        str(script),
        timeout=120,
    )
    assert proc.returncode != 0
    assert time.monotonic() - started < 60
    assert "mpi failed first: exited with code 5" in proc.stderr
    # tfdist names the rank itself: MPICH's own abort line can be lost when it tears the job down.
    assert "[r1] SystemExit: exited with code 5" in proc.stderr
    assert f"at {script}:5 in <module>" in proc.stderr


def test_world_size_must_match_what_tfdist_expected(tmp_path: Path) -> None:

    env = {**os.environ, "TFDIST_WORLD_SIZE": "3"}
    mpiexec = str(Path(sys.executable).parent / "mpiexec")
    proc = subprocess.run(
        [mpiexec, "-n", "2", sys.executable, PROBE, str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode != 0
    assert "the MPI job has 2 rank(s) but tfdist expected 3" in proc.stdout + proc.stderr


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--backend", "mpi", "--ps", "1", "-n", "2"], "cannot run parameter servers"),
        (["--backend", "mpi", "--nnodes", "2", "--hosts", "nosuchnode1,b", "-n", "2"], "does not resolve on"),
        (["--backend", "horovod", "--chief", "-n", "2"], "cannot run parameter servers or a chief"),
    ],
)
def test_bad_mpi_launches(argv: list[str], expected: str, tmp_path: Path) -> None:
    proc = launch(*argv, PROBE, str(tmp_path), timeout=60)
    assert proc.returncode == 2 and expected in proc.stderr and proc.stderr.count("\n") == 1


@pytest.mark.slow  # the first tier: test_fit_equivalence.py's resume after a kill (the TF backend)
def test_resume_after_a_killed_rank_matches_the_uninterrupted_run(mpi_ranks: Path, tmp_path: Path) -> None:
    """Rank 1 SIGKILLs itself after epoch 2; MPI aborts the job, the launcher restarts it from the
    checkpoint."""
    reference, resumed = mpi_ranks, tmp_path / "resumed"
    resumed.mkdir()
    proc = launch(
        "--backend",
        "mpi",
        "-n",
        "2",
        "--cpu",
        "--max-restarts",
        "1",
        "--grace",
        "2",
        "--run-dir",
        str(resumed / "run"),
        PROBE,
        str(resumed),
        "--checkpoint",
        str(tmp_path / "ckpt"),
        "--crash",
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "restarting" in proc.stderr and (resumed / "run" / "attempt-1").is_dir()
    weights = np.load(resumed / "weights-0.npy")
    assert np.max(np.abs(weights - np.load(reference / "weights-0.npy"))) <= 1e-6
    assert json.loads((resumed / "history-0.json").read_text())["steps"] == 12


@pytest.mark.parametrize(("shm", "local_size", "cross_size"), [("1", 3, 1), ("0", 1, 3)])
def test_packed_allreduce_sums_every_layout(
    shm: str, local_size: int, cross_size: int, tmp_path: Path
) -> None:
    """3 ranks (chunks of unequal length): shared-memory path, and MPI alone as across nodes."""
    script = str(Path(__file__).parent.parent / "helpers" / "allreduce_probe.py")
    argv = ["--backend", "mpi", "-n", "3", "--cpu", "--run-dir", str(tmp_path / "run"), script, str(tmp_path)]
    proc = launch(*argv, timeout=120, env={"TFDIST_MPI_SHM": shm})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    reports = [json.loads((tmp_path / f"ok-{r}.json").read_text()) for r in range(3)]
    assert {r["rank"] for r in reports} == {0, 1, 2}
    for report in reports:
        assert report["checked"] == 3 * (1 + 5 + 12 + 17 + 2 + 1000 + 147 + 3 + 100_003 + 4)
        assert (report["local_size"], report["cross_size"]) == (local_size, cross_size)
