"""Jobs on a real single-node Slurm started by scripts/slurm-local.sh (installed from Debian if missing)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from helpers.cli import tfdist

ROOT = Path(__file__).parent.parent.parent
PROBE = str(ROOT / "tests" / "helpers" / "fit_probe.py")
# A directory and ports of its own, so a cluster the user started by hand is not disturbed.
CLUSTER_ENV = {"TFDIST_SLURM_DIR": "/tmp/tfdist-slurm-tests", "TFDIST_SLURM_PORT": "16917"}
FINAL = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY")


@pytest.fixture(scope="session")
def slurm_conf() -> Iterator[str]:
    script = str(ROOT / "scripts" / "slurm-local.sh")
    env = {**os.environ, **CLUSTER_ENV}
    started = subprocess.run([script, "start"], env=env, capture_output=True, text=True, timeout=900)
    assert started.returncode == 0, started.stderr[-3000:]
    yield os.path.join(CLUSTER_ENV["TFDIST_SLURM_DIR"], "slurm.conf")
    # A throwaway cluster: its daemons killed at once (a graceful shutdown cost the run's end ~5 s), then
    # the script removes what they left.
    for record in Path(CLUSTER_ENV["TFDIST_SLURM_DIR"]).glob("*.run.pid"):
        try:
            os.kill(int(record.read_text()), signal.SIGKILL)
        except (ValueError, OSError):
            continue
    subprocess.run([script, "stop"], env=env, capture_output=True, timeout=120)


@pytest.fixture
def slurm_env(slurm_conf: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    monkeypatch.setenv("SLURM_CONF", slurm_conf)
    return {**os.environ, "SLURM_CONF": slurm_conf}


def submit(env: dict[str, str], run_dir: Path, *command: str, options: tuple[str, ...] = ()) -> str:
    args = ("--ntasks-per-node", "2", "--run-dir", str(run_dir), *options, "--", *command)
    proc = tfdist("slurm", "submit", *args, base_env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split()[2].rstrip(";")


def wait_state(job_id: str, states: tuple[str, ...], timeout: float, restarts: int = 0) -> dict[str, str]:
    from tfdist.slurm import commands

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = commands.show_job(job_id)
        if job["JobState"] in states and int(job.get("Restarts", "0")) >= restarts:
            return job
        time.sleep(0.5)
    raise AssertionError(f"job {job_id} still {job['JobState']} after {timeout} s: {job}")


def test_two_task_mnist_cnn_job_completes_with_identical_weights(
    slurm_env: dict[str, str], tmp_path: Path
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    job_id = submit(slurm_env, tmp_path / "run", sys.executable, PROBE, str(out), "--workload", "mnist-cnn")
    job = wait_state(job_id, FINAL, 240)
    log = (tmp_path / "run" / f"slurm-{job_id}.out").read_text()
    assert job["JobState"] == "COMPLETED", log[-3000:]
    w0, w1 = np.load(out / "weights-0.npy"), np.load(out / "weights-1.npy")
    assert np.array_equal(w0, w1)
    assert json.loads((out / "history-0.json").read_text())["steps"] == 12
    status = tfdist("slurm", "status", job_id, base_env=slurm_env, timeout=60)
    assert status.returncode == 0 and "COMPLETED" in status.stdout
    logs = tfdist("slurm", "logs", job_id, base_env=slurm_env, timeout=60)
    assert logs.returncode == 0 and logs.stdout == log


#: Task 1 fails with exit code 3 at once; task 0 would run for a minute, so srun always stops it (143).
FAILS_WHILE_A_PEER_RUNS = (
    "import os, sys, time; time.sleep(60 if os.environ['SLURM_PROCID'] == '0' else 0); sys.exit(3)"
)


def test_failing_task_makes_the_job_failed_with_its_exit_code(
    slurm_env: dict[str, str], tmp_path: Path
) -> None:
    started = time.monotonic()
    job_id = submit(slurm_env, tmp_path / "run", sys.executable, "-c", FAILS_WHILE_A_PEER_RUNS)
    job = wait_state(job_id, FINAL, 120)
    assert time.monotonic() - started < 50, "task 0 was not stopped"
    assert job["JobState"] == "FAILED" and job["ExitCode"] == "3:0", job
    status = tfdist("slurm", "status", job_id, base_env=slurm_env, timeout=60)
    assert "FAILED" in status.stdout and "exit code 3:0" in status.stdout


#: Steps per epoch of the preempted job: 200 steps with a checkpoint every 2 take ~10 s, time enough for the
#: signal to arrive mid-run.
STEPS = "100"


def test_preempted_job_checkpoints_requeues_and_ends_at_the_exact_step(
    slurm_env: dict[str, str], tmp_path: Path
) -> None:
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    out.mkdir()
    job_id = submit(
        slurm_env,
        tmp_path / "run",
        sys.executable,
        PROBE,
        str(out),
        "--checkpoint",
        str(ckpt),
        "--epochs",
        "2",
        "--steps",
        STEPS,
    )
    deadline = time.monotonic() + 180
    while not list(ckpt.glob("ckpt-*.index")) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert list(ckpt.glob("ckpt-*.index")), "training never wrote a checkpoint"
    # What Slurm does before a time limit or preemption with --signal=USR2@90: USR2 to every task.
    signalled = subprocess.run(
        ["scancel", "--signal=USR2", job_id], env=slurm_env, capture_output=True, text=True, timeout=30
    )
    assert signalled.returncode == 0, signalled.stderr
    # Slurm holds a requeued job back for a while (its BeginTime); the test need not wait for that, but the
    # new start must come at least a second after the requeue: slurmd refuses a credential no newer than
    # the one it revoked, to the second ("Killing non-startable batch JobId: Job credential revoked").
    wait_state(job_id, ("PENDING", "COMPLETED", "FAILED", "CANCELLED"), 300, restarts=1)
    time.sleep(2)
    subprocess.run(["scontrol", "update", f"JobId={job_id}", "StartTime=now"], env=slurm_env, timeout=30)
    job = wait_state(job_id, ("COMPLETED", "FAILED", "CANCELLED"), 300, restarts=1)
    log = (tmp_path / "run" / f"slurm-{job_id}.out").read_text()
    assert job["JobState"] == "COMPLETED" and int(job["Restarts"]) >= 1, log[-3000:]
    assert "stop requested (SIGUSR2): checkpoint written at step" in log
    assert "asked Slurm to requeue job" in log
    resumed = json.loads((out / "history-0.json").read_text())
    assert resumed["steps"] == 2 * int(STEPS)
    # The requeued job ends exactly where an uninterrupted run of the same script does.
    reference = tmp_path / "reference"
    reference.mkdir()
    ref = tfdist(
        "launch", "-n", "2", "--cpu", "--run-dir", str(tmp_path / "ref-run"), PROBE, str(reference),
        "--checkpoint", str(tmp_path / "ref-ckpt"), "--epochs", "2", "--steps", STEPS,
        timeout=600,
    )  # fmt: skip
    assert ref.returncode == 0, ref.stderr[-3000:]
    assert np.max(np.abs(np.load(out / "weights-0.npy") - np.load(reference / "weights-0.npy"))) <= 1e-6
    expected = json.loads((reference / "history-0.json").read_text())["history"]
    for name, values in expected.items():
        if name != "examples_per_sec":  # wall-clock timing
            assert np.allclose(resumed["history"][name], values, atol=1e-6, rtol=0), name


def test_unknown_job_id_is_one_line(slurm_env: dict[str, str]) -> None:
    proc = tfdist("slurm", "status", "987654", base_env=slurm_env, timeout=60)
    assert (
        proc.returncode == 2
        and "job 987654 is not known to Slurm" in proc.stderr
        and proc.stderr.count("\n") == 1
    )


HELPERS = ROOT / "tests" / "helpers"


@pytest.mark.slow  # the same path as the model.fit script's below: a script without tfdist, one task each
def test_plain_mwms_script_becomes_one_job(
    slurm_env: dict[str, str], one_process_reference: Callable[..., Path], tmp_path: Path
) -> None:
    """No tfdist import in the script: the task wrapper gives each task its TF_CONFIG."""
    script = str(HELPERS / "plain_mwms.py")
    single, out = one_process_reference(script), tmp_path / "out"
    out.mkdir()
    job_id = submit(slurm_env, tmp_path / "run", sys.executable, script, str(out))
    job = wait_state(job_id, FINAL, 240)
    log = (tmp_path / "run" / f"slurm-{job_id}.out").read_text()
    assert job["JobState"] == "COMPLETED", log[-3000:]
    assert log.count("on 2 replicas") == 2  # both tasks joined one 2-worker strategy
    reference = np.load(single / "weights-0.npy")
    for rank in range(2):
        assert np.max(np.abs(np.load(out / f"weights-{rank}.npy") - reference)) <= 1e-5


def test_keras_model_fit_script_becomes_one_job(
    slurm_env: dict[str, str], one_process_reference: Callable[..., Path], tmp_path: Path
) -> None:
    """model.fit / evaluate / predict under MultiWorkerMirroredStrategy, no tfdist import, 2 Slurm tasks."""
    script = str(HELPERS / "keras_fit.py")
    single, out = one_process_reference(script, "--plain", "--epochs", "2"), tmp_path / "out"
    out.mkdir()
    job_id = submit(slurm_env, tmp_path / "run", sys.executable, script, str(out), "--plain", "--epochs", "2")
    job = wait_state(job_id, FINAL, 240)
    log = (tmp_path / "run" / f"slurm-{job_id}.out").read_text()
    assert job["JobState"] == "COMPLETED", log[-3000:]
    ref_info = json.loads((single / "rank-0.json").read_text())
    for rank in range(2):
        assert (
            np.max(np.abs(np.load(out / f"rank-{rank}.weights.npy") - np.load(single / "rank-0.weights.npy")))
            <= 1e-5
        )
        info = json.loads((out / f"rank-{rank}.json").read_text())
        for key, values in ref_info["history"].items():
            assert np.allclose(info["history"][key], values, atol=1e-5, rtol=0), key
        preds = np.load(out / f"rank-{rank}.predictions.npy")
        assert np.allclose(preds, np.load(single / "rank-0.predictions.npy"), atol=1e-5, rtol=0)
