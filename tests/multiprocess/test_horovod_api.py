"""tfdist's Horovod API on real ranks: collectives against NumPy, Horovod-style Keras and custom-loop
scripts against one process, faults that must end the job, and `import horovod` run unchanged."""

from __future__ import annotations

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

HELPERS = Path(__file__).parent.parent / "helpers"
HAVE_HOROVOD = __import__("importlib.util").util.find_spec("horovod") is not None


def run(argv: list[str], timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env)


def launch(backend: str, n: int, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    args = ("--backend", backend, "-n", str(n), "--cpu", *args)
    return tfdist("launch", *args, env={"TF_CPP_MIN_LOG_LEVEL": "2"}, timeout=timeout)


def weights(path: Path) -> list[np.ndarray]:
    with np.load(path) as data:
        return [data[k] for k in sorted(data.files, key=lambda k: int(k.split("_")[1]))]


def max_diff(a: list[np.ndarray], b: list[np.ndarray]) -> float:
    return max(float(np.max(np.abs(x - y))) for x, y in zip(a, b, strict=True))


@pytest.mark.parametrize("ranks", [2, pytest.param(3, marks=pytest.mark.slow)])  # 3: the same path
def test_collectives_follow_horovods_semantics(ranks: int, tmp_path: Path) -> None:
    script = [str(HELPERS / "hvd_collectives.py"), str(tmp_path)]
    if ranks == 2:  # through tfdist's launcher
        proc = launch("mpi", 2, "--run-dir", str(tmp_path / "run"), *script)
    else:  # under a plain MPI launcher: ranks come from MPI alone
        mpiexec = str(Path(sys.executable).parent / "mpiexec")
        proc = run([mpiexec, "-n", str(ranks), sys.executable, "-m", "mpi4py", *script])
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for rank in range(ranks):
        checks = json.loads((tmp_path / f"checks-{rank}.json").read_text())
        assert checks.pop("ranks") == [rank, ranks, rank, ranks, 0, 1]  # one node: local = global
        assert len(checks) >= 25
        bad = {name: v for name, v in checks.items() if not (isinstance(v, float) and v <= 1e-6)}
        assert not bad, f"rank {rank}: {bad}"


def test_keras_script_on_two_ranks_equals_one_process_with_the_summed_batch(
    one_process_reference: Callable[..., Path], tmp_path: Path
) -> None:
    ranks = tmp_path / "ranks"
    proc = launch("mpi", 2, "--run-dir", str(tmp_path / "run"), str(HELPERS / "hvd_keras.py"), str(ranks))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    single = one_process_reference(HELPERS / "hvd_keras.py", "--batch", "64", "--lr-ranks", "2")
    w0, w1, w_one = weights(ranks / "rank0.npz"), weights(ranks / "rank1.npz"), weights(single / "rank0.npz")
    assert max_diff(w0, w1) == 0.0  # the ranks agree exactly
    assert max_diff(w0, w_one) <= 1e-5  # and train the one model of the summed batch
    h0, h1 = (json.loads((ranks / f"history-{r}.json").read_text()) for r in (0, 1))
    h_one = json.loads((single / "history-0.json").read_text())
    assert h0 == h1  # MetricAverageCallback: every rank reports the job's average
    for name in ("loss", "accuracy"):
        assert np.allclose(h0[name], h_one[name], atol=1e-5), name
    # ModelCheckpoint on rank 0 only: one file per epoch, nothing else written by rank 1.
    assert sorted(p.name for p in ranks.glob("checkpoint-*")) == [f"checkpoint-{e}.keras" for e in (1, 2, 3)]
    assert list((ranks / "tb" / "train").glob("events.out.tfevents.*"))  # TensorBoard, rank 0 only


def test_custom_loop_with_distributed_gradient_tape_equals_one_process(
    one_process_reference: Callable[..., Path], tmp_path: Path
) -> None:
    ranks, single = tmp_path / "ranks", one_process_reference(HELPERS / "hvd_loop.py", "--batch", "64")
    proc = launch("mpi", 2, "--run-dir", str(tmp_path / "run"), str(HELPERS / "hvd_loop.py"), str(ranks))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    w0, w1 = weights(ranks / "rank0.npz"), weights(ranks / "rank1.npz")
    assert max_diff(w0, w1) == 0.0
    assert max_diff(w0, weights(single / "rank0.npz")) <= 1e-5
    losses, one_losses = (json.loads((d / "losses-0.json").read_text()) for d in (ranks, single))
    assert len(losses) == 24 and np.allclose(losses, one_losses, atol=1e-5)


@pytest.mark.skipif(HAVE_HOROVOD, reason="Horovod is installed here: --backend horovod runs Horovod itself")
def test_unchanged_horovod_import_runs_through_the_launcher(tmp_path: Path) -> None:
    """`import horovod.tensorflow.keras as hvd`, warm-up included, under --backend horovod without Horovod."""
    out = tmp_path / "out"
    script = [str(HELPERS / "hvd_keras.py"), str(out), "--import", "horovod", "--warmup-epochs", "2"]
    proc = launch("horovod", 2, "--run-dir", str(tmp_path / "run"), *script)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    notices = [line for line in proc.stderr.splitlines() if "Horovod is not installed here" in line]
    assert len(notices) == 1, proc.stderr[-2000:]
    assert max_diff(weights(out / "rank0.npz"), weights(out / "rank1.npz")) == 0.0
    lr = json.loads((out / "history-0.json").read_text())["lr"]
    # Warm-up from lr/size towards lr over 2 epochs (0.1 = 0.05 x 2 ranks), then held.
    assert 0.05 < lr[0] < lr[1] <= 0.1 + 1e-7 and abs(lr[2] - lr[1]) < 1e-7
    assert "finished gradual learning rate warmup" in proc.stdout


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        (
            "mismatch",
            "Mismatched ALLREDUCE tensor shapes: rank 0 sent float32[3, 4], but rank 1 sent float32[3, 5]",
        ),
        ("die", "exited with code 7"),
    ],
)
def test_faults_end_the_job_instead_of_hanging(mode: str, expected: str, tmp_path: Path) -> None:
    started = time.monotonic()
    proc = launch(
        "mpi", 2, "--run-dir", str(tmp_path / "run"), str(HELPERS / "hvd_faults.py"), mode, timeout=240
    )
    assert proc.returncode != 0
    assert expected in proc.stdout + proc.stderr
    assert "unreachable" not in proc.stdout
    assert time.monotonic() - started < 200
