"""kill -9 of worker 1 at a random step of `tfdist train --workers 2 --max-restarts 1`: the restarted run
ends exactly where the uninterrupted one does (checkpointed weights and optimizer state to 1e-6, the
whole history), for every built-in workload kind and both backends, and with the optimizer sharded."""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import psutil
import pytest

from helpers.cli import TFDIST

STEPS, EPOCHS = 20, 2


def command(out: Path, workload: str, backend: str) -> list[str]:
    """``backend``: tf, mpi, or mpi-sharded (the optimizer's slots split between the ranks, in gradient
    buckets: the coordinator's thread is mid-step when the fault lands)."""
    sharded = ["--shard-optimizer", "--bucket-mb", "0.5"] if backend == "mpi-sharded" else []
    return [
        *TFDIST, "train", "--workload", workload, "--dataset", "digits",
        "--epochs", str(EPOCHS), "--steps-per-epoch", str(STEPS), "--batch-size-per-replica", "16",
        "--checkpoint-every", "2", "--lr", "0.01", "--workers", "2", "--backend", backend.split("-")[0],
        "--max-restarts", "1", "--run-dir", str(out), *sharded,
    ]  # fmt: skip


def latest_step(out: Path) -> int:
    index = out / "checkpoints" / "checkpoint"
    match = re.search(r'model_checkpoint_path: "ckpt-(\d+)"', index.read_text()) if index.exists() else None
    return int(match.group(1)) if match else 0


def workers(launcher: psutil.Process) -> dict[int, psutil.Process]:
    """Training processes by rank (TFDIST_RANK under the TF launcher, PMI_RANK under mpiexec)."""
    found = {}
    for proc in launcher.children(recursive=True):
        try:
            env = proc.environ()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        rank = env.get("PMI_RANK", env.get("TFDIST_RANK"))
        if rank is not None and "tfdist.workloads.job" in " ".join(proc.cmdline()):
            found[int(rank)] = proc
    return found


def checkpoint_values(path: Path) -> dict[str, np.ndarray]:
    import tensorflow as tf

    reader = tf.train.load_checkpoint(str(path))
    return {k: reader.get_tensor(k) for k, d in reader.get_variable_to_dtype_map().items() if d.is_floating}


# The whole matrix is the second tier (./dev test --all). The first tier resumes after a killed worker on
# each backend: test_fit_equivalence.py (tf) and test_mpi_backend.py (mpi).
@pytest.mark.parametrize(
    ("workload", "backend"),
    [
        pytest.param("regression", "tf", marks=pytest.mark.slow),
        pytest.param("regression", "mpi", marks=pytest.mark.slow),
        pytest.param("mnist-cnn", "tf", marks=pytest.mark.slow),
        pytest.param("mnist-cnn", "mpi", marks=pytest.mark.slow),
        pytest.param("big-gradient", "tf", marks=pytest.mark.slow),
        pytest.param("big-gradient", "mpi", marks=pytest.mark.slow),  # MPI resume: test_mpi_backend.py
        pytest.param("mnist-cnn", "mpi-sharded", marks=pytest.mark.slow),
    ],
)
def test_kill_9_at_a_random_step_resumes_exactly(workload: str, backend: str, tmp_path: Path) -> None:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    reference, faulty = tmp_path / "reference", tmp_path / "faulty"
    done = subprocess.run(
        command(reference, workload, backend), capture_output=True, text=True, timeout=600, env=env
    )
    assert done.returncode == 0, done.stderr[-3000:]

    # A checkpoint step before the end, drawn per case (reproducible): epoch boundaries included.
    target = random.Random(f"{workload}-{backend}").randrange(2, STEPS + STEPS // 2, 2)
    log = (tmp_path / "faulty.log").open("w")  # a file, not a pipe: nobody reads until the end
    launcher = subprocess.Popen(
        command(faulty, workload, backend), stdout=log, stderr=subprocess.STDOUT, env=env
    )
    try:
        deadline = time.monotonic() + 300
        while latest_step(faulty) < target:
            assert launcher.poll() is None and time.monotonic() < deadline, "the run ended before the fault"
            time.sleep(0.01)
        ranks = workers(psutil.Process(launcher.pid))
        assert set(ranks) == {0, 1}, ranks
        for proc in ranks.values():  # freeze both where they are: the fault lands mid-run, at a random step
            proc.send_signal(signal.SIGSTOP)
        ranks[1].send_signal(signal.SIGKILL)
        ranks[0].send_signal(signal.SIGCONT)
        launcher.wait(timeout=600)
    finally:
        if launcher.poll() is None:
            launcher.kill()
        log.close()
    output = (tmp_path / "faulty.log").read_text()
    assert launcher.returncode == 0, output[-3000:]
    assert "restarting all workers (restart 1/1)" in output, output[-3000:]

    final = EPOCHS * STEPS
    a = checkpoint_values(reference / "checkpoints" / f"ckpt-{final}")
    b = checkpoint_values(faulty / "checkpoints" / f"ckpt-{final}")
    assert a.keys() == b.keys() and len(a) >= 3
    worst = max(float(np.max(np.abs(a[k].astype(np.float64) - b[k]))) if a[k].size else 0.0 for k in a)
    assert worst <= 1e-6, f"killed after step {target}: max difference {worst}"
    ha = json.loads((reference / "metrics.json").read_text())["history"]
    hb = json.loads((faulty / "metrics.json").read_text())["history"]
    ha.pop("examples_per_sec"), hb.pop("examples_per_sec")  # wall-clock timing
    assert ha.keys() == hb.keys()
    for name in ha:
        assert np.allclose(ha[name], hb[name], atol=1e-6, rtol=0), (name, ha[name], hb[name])
