"""Preemption and a lost node on a 2-node Slurm job: the job ends, says why, and the requeued job resumes
to the weights of an uninterrupted run."""

from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from hostcluster import FINAL, Cluster, one_process

PY = sys.executable
PROBE = str(Path(__file__).parent.parent / "helpers" / "fit_probe.py")
TRAIN = ("--epochs", "2", "--steps", "300")


def wait_for_checkpoint(ckpt: Path, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while not list(ckpt.glob("ckpt-*.index")) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert list(ckpt.glob("ckpt-*.index")), "training never wrote a checkpoint"


def wait_node(cluster: Cluster, node: str, states: tuple[str, ...], timeout: float) -> None:
    """Wait until Slurm reports ``node`` in one of ``states`` (``down*`` counts as down)."""
    deadline = time.monotonic() + timeout
    state = ""
    while time.monotonic() < deadline:
        state = cluster.on("node1", "sinfo", "-h", "-n", node, "-o", "%t").stdout.strip()
        if state.rstrip("*~#") in states:
            return
        time.sleep(0.5)
    raise AssertionError(f"{node} still {state!r} after {timeout} s, not one of {states}")


def eligible_now(cluster: Cluster, job_id: str) -> None:
    """Slurm holds a requeued job back for a while (its BeginTime); the tests need not wait for that."""
    deadline = time.monotonic() + 120
    while cluster.job(job_id)["JobState"] not in ("PENDING", *FINAL):
        assert time.monotonic() < deadline, cluster.job(job_id)
        time.sleep(0.3)
    # At least a second after the requeue: slurmd refuses a credential no newer than the one it revoked,
    # to the second ("Killing non-startable batch JobId: Job credential revoked").
    time.sleep(2)
    cluster.on("node1", "scontrol", "update", f"JobId={job_id}", "StartTime=now")


def uninterrupted(tmp_path: Path) -> tuple[np.ndarray, dict[str, list[float]]]:
    """The same training in one process, never stopped."""
    ref = tmp_path / "reference"
    ref.mkdir()
    one_process(PROBE, str(ref), "--checkpoint", str(tmp_path / "ref-ckpt"), *TRAIN)
    return np.load(ref / "weights-0.npy"), json.loads((ref / "history-0.json").read_text())["history"]


def assert_same_run(out: Path, tmp_path: Path, ranks: int) -> None:
    weights, history = uninterrupted(tmp_path)
    for rank in range(ranks):
        assert np.max(np.abs(np.load(out / f"weights-{rank}.npy") - weights)) <= 1e-5
    resumed = json.loads((out / "history-0.json").read_text())
    assert resumed["steps"] == 600
    for name, values in history.items():
        if name != "examples_per_sec":  # wall-clock timing
            assert np.allclose(resumed["history"][name], values, atol=1e-5, rtol=0), name


@pytest.mark.slow  # preemption on one node runs in the first tier (tests/slurm)
def test_preempted_two_node_job_resumes_exactly(cluster: Cluster, tmp_path: Path) -> None:
    """USR2 to every task on both nodes -> checkpoint -> requeue -> the run ends as if never stopped."""
    out, ckpt, run = tmp_path / "out", tmp_path / "ckpt", tmp_path / "run"
    out.mkdir()
    job_id = cluster.submit(
        run,
        PY,
        PROBE,
        str(out),
        "--checkpoint",
        str(ckpt),
        *TRAIN,
        options=("--nodes", "2", "--ntasks-per-node", "1"),
    )
    wait_for_checkpoint(ckpt)
    # What Slurm does before a time limit or a preemption with --signal=USR2@90: USR2 to every task.
    signalled = cluster.on("node1", "scancel", "--signal=USR2", job_id)
    assert signalled.returncode == 0, signalled.stderr
    eligible_now(cluster, job_id)
    job = cluster.wait(job_id, FINAL, 420, restarts=1)
    log = (run / f"slurm-{job_id}.out").read_text()
    assert job["JobState"] == "COMPLETED", log[-4000:]
    assert log.count("stop requested (SIGUSR2): checkpoint written at step") == 2  # one per node
    assert "asked Slurm to requeue job" in log
    assert_same_run(out, tmp_path, 2)


@pytest.mark.slow
def test_a_lost_node_ends_the_job_names_it_and_the_requeued_job_resumes(
    cluster: Cluster, tmp_path: Path
) -> None:
    """Every process of node2 killed (its slurmd too): the task on node1 ends within seconds, names node2
    and the last checkpoint, requeues the job; once node2 is back the job resumes from that checkpoint."""
    out, ckpt, run = tmp_path / "out", tmp_path / "ckpt", tmp_path / "run"
    out.mkdir()
    timeout_s, margin_s = 10, 30
    job_id = cluster.submit(
        run,
        PY,
        PROBE,
        str(out),
        "--checkpoint",
        str(ckpt),
        *TRAIN,
        options=(
            "--nodes",
            "2",
            "--ntasks-per-node",
            "1",
            "--nodelist",
            "node[1-2]",
            "--export",
            f"TFDIST_COLLECTIVE_TIMEOUT={timeout_s}",
        ),
    )
    wait_for_checkpoint(ckpt)
    try:
        killed = cluster.hosts_script("kill", "node2")
        lost_at = time.monotonic()
        assert killed.returncode == 0, killed.stderr
        job = cluster.wait(job_id, ("PENDING", "REQUEUED", "COMPLETING", "REQUEUE_HOLD", *FINAL), 120)
        ended_after = time.monotonic() - lost_at
        log = (run / f"slurm-{job_id}.out").read_text()
        assert ended_after <= timeout_s + margin_s, (ended_after, job["JobState"], log[-3000:])
        report = re.search(
            # "... (node2:PORT) at step N" or, when node2's address answers but its process is gone,
            # "... (node2:PORT) refuses connections: its process is gone at step N"
            r"lost contact with worker 1 \(node2:\d+\)[^\n]* at step \d+ .*last checkpoint (\S+) ",
            log,
        )
        assert report, log[-4000:]
        assert f"asked Slurm to requeue job {job_id}" in log
        # As on a real cluster: Slurm declares the silent node DOWN (SlurmdTimeout), then it is repaired.
        wait_node(cluster, "node2", ("down",), 120)
    finally:
        back = cluster.slurm_script("node-start", "node2")
    assert back.returncode == 0, back.stderr
    wait_node(cluster, "node2", ("idle", "mix", "alloc"), 120)
    eligible_now(cluster, job_id)
    job = cluster.wait(job_id, FINAL, 480, restarts=1)
    log = (run / f"slurm-{job_id}.out").read_text()
    assert job["JobState"] == "COMPLETED", log[-4000:]
    resumed_from = re.search(r"resumed from (\S+) at step (\d+)", log)
    assert resumed_from and resumed_from.group(1) == report.group(1), log[-4000:]
    print(f"node lost -> job ended in {ended_after:.1f} s; resumed from {resumed_from.group(1)}")
    assert_same_run(out, tmp_path, 2)


ELASTIC = str(Path(__file__).parent.parent / "helpers" / "elastic_fit.py")
ELASTIC_ARGS = ("--epochs", "3", "--steps", "5")


def progress(out: Path) -> int:
    try:
        return int((out / "progress").read_text() or 0)
    except (FileNotFoundError, ValueError):
        return 0


@pytest.mark.slow
def test_a_job_with_a_node_range_is_requeued_on_the_nodes_left(cluster: Cluster, tmp_path: Path) -> None:
    """`--nodes 2-3`: the job starts on 3 nodes; node3 is lost at step 5, the tasks left name it and
    requeue the job; node3 stays down, so Slurm starts the requeued job on the 2 nodes left, and
    tfdist.fit resumes from its checkpoint with the same global batch of 12 (6 per replica instead of 4)
    to the weights of an uninterrupted run."""
    out, ckpt, run = tmp_path / "out", tmp_path / "ckpt", tmp_path / "run"
    out.mkdir()
    ref = tmp_path / "reference"
    ref.mkdir()
    one_process(ELASTIC, str(ref), str(ref / "ckpt"), *ELASTIC_ARGS)
    job_id = cluster.submit(
        run,
        PY,
        ELASTIC,
        str(out),
        str(ckpt),
        *ELASTIC_ARGS,
        "--pace",
        "0.3",
        options=("--nodes", "2-3", "--ntasks-per-node", "1", "--export", "TFDIST_COLLECTIVE_TIMEOUT=10"),
    )
    try:
        deadline = time.monotonic() + 240
        while progress(out) < 5:
            assert time.monotonic() < deadline, (run / f"slurm-{job_id}.out").read_text()[-3000:]
            time.sleep(0.1)
        assert cluster.job(job_id)["NumNodes"] == "3"
        killed = cluster.hosts_script("kill", "node3")
        assert killed.returncode == 0, killed.stderr
        cluster.wait(job_id, ("PENDING", "REQUEUED", "REQUEUE_HOLD", *FINAL), 120)
        log = (run / f"slurm-{job_id}.out").read_text()
        assert "lost contact with worker 2" in log and f"asked Slurm to requeue job {job_id}" in log, log[
            -4000:
        ]
        wait_node(cluster, "node3", ("down",), 120)  # Slurm's SlurmdTimeout: node3 is not coming back
        eligible_now(cluster, job_id)
        job = cluster.wait(job_id, FINAL, 420, restarts=1)
        log = (run / f"slurm-{job_id}.out").read_text()
        assert job["JobState"] == "COMPLETED", log[-4000:]
        assert job["NumNodes"] == "2" and "node3" not in job["NodeList"], job
        assert re.search(r"resumed from \S+ at step \d+", log), log[-4000:]
    finally:
        back = cluster.slurm_script("node-start", "node3")
    assert back.returncode == 0, back.stderr
    wait_node(cluster, "node3", ("idle", "mix", "alloc"), 120)  # the shared cluster whole again
    reference = np.load(ref / "weights-0.npy")
    for rank in range(2):
        assert json.loads((out / f"run-{rank}.json").read_text())["world"] == 2
        assert np.max(np.abs(np.load(out / f"weights-{rank}.npy") - reference)) <= 1e-5
