"""The MPI backend across test hosts (`tfdist launch --backend mpi --nnodes 2 --rdzv …`, Hydra's proxies
started by tfdist): a peer host lost or a link cut mid-training ends the job on every node that can still
act, without a watchdog: each node's launcher is told through the rendezvous (the lost node's connection
closed, or TCP keep-alive found it gone) and ends its ranks. Times are printed (pytest -s) for
docs/guides/failures.md.
"""

from __future__ import annotations

import itertools
import json
import random
import subprocess
import time
from pathlib import Path

import hostcluster
import numpy as np
import pytest
from hostcluster import Hosts, clean_env, finish, one_process, wait_for

SCRIPT = str(Path(__file__).parent.parent / "helpers" / "elastic_fit.py")
ENV = clean_env(TFDIST_RDZV_TOKEN="mpi-faults-5e2a")
#: The run's test hosts (the ``testhosts`` fixture makes them), with this module's environment.
HOSTS = Hosts(ENV)
_ports = itertools.count(29800)


def hosts_script(*args: str) -> None:
    HOSTS.hosts_script(*args, check=True)


def start(
    tmp_path: Path, *args: str, nnodes: str = "2", env: dict[str, str] | None = None
) -> dict[str, subprocess.Popen[str]]:
    """An MPI-backend tfdist.fit job on node1 and node2, one rank each, paced so that it runs ~10 s
    (``env``: added to the module's environment)."""
    endpoint = f"node1:{next(_ports)}"
    (tmp_path / "out").mkdir()
    common = ["--nnodes", nnodes, "--rdzv", endpoint, "--rdzv-timeout", "60", "--cpu", "-n", "1"]
    script = [SCRIPT, str(tmp_path / "out"), str(tmp_path / "ckpt"), "--epochs", "8", "--steps", "5"]
    return {
        f"node{i}": hostcluster.launch_on(
            f"node{i}",
            {**ENV, **(env or {})},
            *common,
            "--backend",
            "mpi",
            "--run-dir",
            str(tmp_path / f"run-node{i}"),
            *args,
            *script,
            "--pace",
            "0.25",
        )
        for i in (2, 1)
    }


def progress(tmp_path: Path) -> int:
    try:
        return int((tmp_path / "out" / "progress").read_text() or 0)
    except (FileNotFoundError, ValueError):
        return 0


def ended(tmp_path: Path, node: str) -> dict[str, object] | None:
    """The launcher's record of how its attempt ended (wall-clock time, the failure line), or None yet."""
    try:
        return dict(json.loads((tmp_path / f"run-{node}" / "attempt-0" / "ended.json").read_text()))
    except (FileNotFoundError, ValueError):
        return None


def assert_nothing_left(*hosts: str, grace: float = 10) -> None:
    """No process of the job on the hosts; a SIGKILLed process may take a moment to be reaped (bounded)."""
    deadline = time.monotonic() + grace
    while (left := [pid for host in hosts for pid in HOSTS.processes(host)]) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert left == [], subprocess.run(
        ["ps", "-o", "pid,ppid,etime,args", "-p", ",".join(map(str, left))], capture_output=True, text=True
    ).stdout


def cut_node2_link_at_step_5(
    tmp_path: Path, procs: dict[str, subprocess.Popen[str]]
) -> tuple[dict[str, float], dict[str, tuple[int, str]]]:
    """Cut node2's link at step 5, wait until both launchers ended their first attempt, plug it back (a
    job with restarts meets again then) and finish: each node's seconds from the cut to its attempt's end,
    and each launcher's exit code and output."""
    try:
        wait_for("step 5", lambda: progress(tmp_path) >= 5)
        hosts_script("cut", "node2")
        cut = time.time()
        wait_for("both ends", lambda: all(ended(tmp_path, node) is not None for node in procs))
    finally:
        hosts_script("plug", "node2")
    records = {node: ended(tmp_path, node) or {} for node in procs}
    took = {node: float(record["ended_at"]) - cut for node, record in records.items()}  # type: ignore[arg-type]
    results = dict(zip(procs, finish(list(procs.values()), timeout=180), strict=True))
    return took, results


@pytest.mark.slow
def test_a_lost_host_ends_the_mpi_job_on_the_other_at_once(testhosts: Hosts, tmp_path: Path) -> None:
    """node2 loses power at step 5: node1's launcher is told (node2's rendezvous connection closed), ends
    its ranks and Hydra, names node2; no watchdog is set."""
    procs = start(tmp_path)
    wait_for("step 5", lambda: progress(tmp_path) >= 5)
    HOSTS.kill("node2")
    killed = time.time()
    (code, output), _ = finish([procs["node1"], procs["node2"]], timeout=120)
    record = ended(tmp_path, "node1")
    assert record is not None, output[-3000:]
    took = float(record["ended_at"]) - killed  # type: ignore[arg-type]
    print(f"MPI, host lost: node1 ended its ranks {took:.1f} s after the kill: {record['failure']}")
    assert code != 0 and "node node2 left the job" in output, output[-3000:]
    assert_nothing_left("node1", "node2")


@pytest.mark.slow
def test_a_cut_link_ends_the_mpi_job_on_both_sides(testhosts: Hosts, tmp_path: Path) -> None:
    """node2's link is cut at step 5: MPI itself would wait forever; each side's rendezvous connection
    times out (TCP keep-alive) and each launcher ends its ranks, naming the other side."""
    took, results = cut_node2_link_at_step_5(tmp_path, start(tmp_path))
    for node in ("node1", "node2"):
        record = ended(tmp_path, node)
        assert record is not None
        print(f"MPI, link cut: {node} ended its ranks {took[node]:.1f} s after the cut: {record['failure']}")
        code, output = results[node]
        assert code != 0 and "host or link down" in output, output[-3000:]
    assert "node node2 left the job" in results["node1"][1]
    assert "node node1 left the job" in results["node2"][1]
    assert_nothing_left("node1", "node2")


@pytest.mark.slow
def test_a_cut_link_with_a_restart_resumes_the_mpi_job_exactly(testhosts: Hosts, tmp_path: Path) -> None:
    """As above with --max-restarts 1: both launchers end their ranks, meet again at the rendezvous once
    the link is back (round 1), start one new MPI job across both hosts, resume from the last checkpoint
    and end at the uninterrupted run's weights."""
    single = tmp_path / "single"
    single.mkdir()
    one_process(SCRIPT, str(single), str(single / "ckpt"), "--epochs", "8", "--steps", "5")
    took, results = cut_node2_link_at_step_5(tmp_path, start(tmp_path, "--max-restarts", "1"))
    print(f"MPI, link cut, restarted: the first attempt ended {took} s after the cut")
    for node in ("node1", "node2"):
        code, output = results[node]
        assert code == 0, output[-3000:]
        assert "host or link down" in output and "(round 1)" in output, output[-3000:]
    assert "resumed from" in results["node1"][1], results["node1"][1][-3000:]
    reference = np.load(single / "weights-0.npy")
    for rank in range(2):
        assert np.max(np.abs(np.load(tmp_path / "out" / f"weights-{rank}.npy") - reference)) <= 1e-6
    assert_nothing_left("node1", "node2")


@pytest.mark.slow
@pytest.mark.parametrize("optimizer", ["whole", "sharded"])
def test_elastic_mpi_job_loses_a_host_and_goes_on_as_one_process(
    optimizer: str, testhosts: Hosts, tmp_path: Path
) -> None:
    """--nnodes 1:2 on the MPI backend: node2 loses power at a random step; node1 is told, meets alone and
    goes on as one rank with the same global batch, to the uninterrupted run's weights. Sharded
    (TFDIST_SHARD_OPTIMIZER=1): the momentum of both halves comes back from the whole checkpoint to the
    one rank left."""
    single = tmp_path / "single"
    single.mkdir()
    one_process(SCRIPT, str(single), str(single / "ckpt"), "--epochs", "8", "--steps", "5")
    env = {"TFDIST_SHARD_OPTIMIZER": "1"} if optimizer == "sharded" else {}
    procs = start(tmp_path, "--max-restarts", "1", nnodes="1:2", env=env)
    step = random.randint(3, 25)
    print(f"node2 is lost at step {step}")
    wait_for(f"step {step}", lambda: progress(tmp_path) >= step)
    HOSTS.kill("node2")
    code, output = finish([procs["node1"]], timeout=180)[0]
    finish([procs["node2"]], timeout=60)
    assert code == 0, output[-3000:]
    assert "the job goes on with 1 node(s) instead of 2" in output and "(round 1)" in output, output[-3000:]
    assert "node node2 left the job" in output, output[-3000:]
    if optimizer == "sharded":
        logs = "\n".join(p.read_text() for p in (tmp_path / "run-node1").rglob("*.log"))
        assert "in 2 shards of" in logs, logs[-3000:]  # the two ranks ran sharded before the loss
    reference = np.load(single / "weights-0.npy")
    assert np.max(np.abs(np.load(tmp_path / "out" / "weights-0.npy") - reference)) <= 1e-5
    assert_nothing_left("node1", "node2")
