"""The core promise: N replicas or N workers train exactly like one device with the same global batch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from helpers.cli import TFDIST

PROBE = str(Path(__file__).parent.parent / "helpers" / "fit_probe.py")


def run_probe(
    out: Path, env: dict[str, str] | None = None, launch: list[str] | None = None, *extra: str
) -> subprocess.CompletedProcess[str]:
    out.mkdir(parents=True, exist_ok=True)
    prefix = [*TFDIST, "launch", *launch, "--run-dir", str(out / "run")] if launch else [sys.executable]
    proc = subprocess.run(
        [*prefix, PROBE, str(out), *extra],
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


@pytest.fixture(scope="module")
def single(one_process_reference: Callable[..., Path]) -> np.ndarray:
    return np.load(one_process_reference(PROBE) / "weights-0.npy")


@pytest.fixture(scope="module")
def two_workers(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("two")
    run_probe(out, None, ["-n", "2", "--cpu"])
    return out


@pytest.mark.parametrize("replicas", [2, pytest.param(4, marks=pytest.mark.slow)])
def test_mirrored_logical_cpus_match_one_device(replicas: int, single: np.ndarray, tmp_path: Path) -> None:
    run_probe(tmp_path, {"TFDIST_CPU_REPLICAS": str(replicas)})
    mirrored = np.load(tmp_path / "weights-0.npy")
    assert np.max(np.abs(mirrored - single)) <= 1e-5
    assert not np.allclose(single, 0)


def test_two_workers_match_one_process(single: np.ndarray, two_workers: Path) -> None:
    w0, w1 = np.load(two_workers / "weights-0.npy"), np.load(two_workers / "weights-1.npy")
    assert np.array_equal(w0, w1)
    assert np.max(np.abs(w0 - single)) <= 1e-5
    h0, h1 = (json.loads((two_workers / f"history-{r}.json").read_text()) for r in (0, 1))
    h0["history"].pop("examples_per_sec"), h1["history"].pop("examples_per_sec")  # local wall-clock timing
    assert h0 == h1  # metrics aggregated over all workers: same history everywhere
    assert h0["steps"] == 12 and len(h0["history"]["loss"]) == 3 and "val_mae" in h0["history"]


def test_resume_after_kill_matches_uninterrupted_run(two_workers: Path, tmp_path: Path) -> None:
    proc = run_probe(
        tmp_path,
        None,
        ["-n", "2", "--cpu", "--max-restarts", "1", "--grace", "2"],
        "--checkpoint",
        str(tmp_path / "ckpt"),
        "--crash",
    )
    assert "w1 failed first: killed by SIGKILL" in proc.stderr and "restarting all workers" in proc.stderr
    resumed = np.load(tmp_path / "weights-0.npy")
    assert np.max(np.abs(resumed - np.load(two_workers / "weights-0.npy"))) <= 1e-6
    assert json.loads((tmp_path / "history-0.json").read_text())["steps"] == 12
    assert (tmp_path / "run" / "attempt-1").is_dir()
    # fit returns on no worker before the chief's final checkpoint is on disk
    seen = {(tmp_path / f"latest-{r}.txt").read_text() for r in range(2)}
    assert len(seen) == 1 and seen.pop().endswith("-12"), seen


# The first tier: the preempted Slurm job of tests/slurm (the signal, the checkpoint, the resume).
@pytest.mark.slow
def test_sigterm_checkpoints_at_a_step_boundary_and_resume_is_exact(tmp_path: Path) -> None:
    """Preemption: SIGTERM to the launcher reaches every worker; all stop at the same step after a
    checkpoint."""
    import signal
    import time

    long = ["--epochs", "2", "--steps", "100"]  # 200 steps, a checkpoint every 2: seconds of room to stop in
    reference = tmp_path / "reference"
    run_probe(reference, None, ["-n", "2", "--cpu"], *long)
    out, ckpt = tmp_path / "preempted", tmp_path / "ckpt"
    out.mkdir()
    launcher = subprocess.Popen(
        [
            *TFDIST,
            "launch",
            "-n",
            "2",
            "--cpu",
            "--run-dir",
            str(out / "run"),
            PROBE,
            str(out),
            "--checkpoint",
            str(ckpt),
            *long,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while (
            not list(ckpt.glob("ckpt-*.index")) and time.monotonic() < deadline
        ):  # checkpoint_every=2: training runs
            time.sleep(0.1)
        launcher.send_signal(signal.SIGTERM)
        stdout, stderr = launcher.communicate(timeout=60)
    finally:
        launcher.kill()
    assert launcher.returncode == 128 + signal.SIGTERM, stderr[-2000:]
    assert "stop requested (SIGTERM): checkpoint written at step" in stdout
    stopped_at = int(stdout.split("checkpoint written at step ")[1].split(";")[0])
    assert 0 < stopped_at < 200
    assert not (out / "weights-0.npy").exists()  # it really stopped early
    for r in (0, 1):  # both workers stopped at the same step boundary
        assert (
            f"checkpoint written at step {stopped_at};"
            in (out / "run" / "attempt-0" / f"worker{r}.log").read_text()
        )
    run_probe(out, None, ["-n", "2", "--cpu"], "--checkpoint", str(ckpt), *long)
    resumed = json.loads((out / "history-0.json").read_text())
    assert resumed["steps"] == 200
    assert np.max(np.abs(np.load(out / "weights-0.npy") - np.load(reference / "weights-0.npy"))) <= 1e-6


# Arrays in the first tier; a dataset and a dataset_fn in the second (./dev test --all).
@pytest.mark.parametrize(
    "data",
    # The first tier: test_launch.py's parameter-server job.
    [pytest.param(d, marks=pytest.mark.slow) for d in ("arrays", "dataset", "fn")],
)
def test_parameter_server_fit_reaches_the_single_process_loss_band(data: str, tmp_path: Path) -> None:
    args = ["--epochs", "3", "--steps", "12"]
    run_probe(tmp_path / "single", None, None, *args)
    run_probe(tmp_path / "ps", None, ["-n", "2", "--ps", "1", "--cpu"], *args, "--data", data)
    single = json.loads((tmp_path / "single" / "history-0.json").read_text())
    ps = json.loads((tmp_path / "ps" / "history-0.json").read_text())
    assert ps["steps"] == 36  # tfdist's own counter: every scheduled step counted exactly once
    assert ps["history"]["loss"][-1] < ps["history"]["loss"][0] / 5
    assert ps["history"]["val_loss"][-1] <= 1.5 * single["history"]["val_loss"][-1]


@pytest.mark.slow
def test_sharding_asked_of_a_parameter_server_job_is_one_line(tmp_path: Path) -> None:
    """TFDIST_SHARD_OPTIMIZER=1 under ParameterServerStrategy: exit 2, the line, no traceback, no result."""
    out = tmp_path / "ps"
    out.mkdir()
    proc = subprocess.run(
        [*TFDIST, "launch", "-n", "2", "--ps", "1", "--cpu", "--run-dir", str(out / "run"), PROBE, str(out)],
        env={**os.environ, "TFDIST_SHARD_OPTIMIZER": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "shard_optimizer does not apply under ParameterServerStrategy" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not list(out.glob("history-*.json")) and not list(out.glob("weights-*.npy"))
