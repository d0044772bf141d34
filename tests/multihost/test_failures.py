"""Failures across test hosts: a cut link, a host unreachable at the start, a host lost mid-run.

Every node runs `tfdist launch --rdzv node1:PORT` on its own test host (network namespace); faults come from
scripts/testhosts.sh (cut / plug / kill). Weights are compared with the same script in one process, times
are measured from the fault and printed (pytest -s) for docs/guides/failures.md.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import hostcluster
import numpy as np
import pytest
from hostcluster import SUBNET, Hosts, clean_env, finish, one_process, wait_for

SCRIPT = str(Path(__file__).parent.parent / "helpers" / "elastic_fit.py")
#: The same job as a plain Keras script: model.fit + BackupAndRestore, no tfdist import.
KERAS_SCRIPT = str(Path(__file__).parent.parent / "helpers" / "elastic_keras_fit.py")
PY = sys.executable
#: Seconds a collective waits for a silent peer in these tests (TensorFlow's default here is 300).
COLLECTIVE_TIMEOUT = 5.0
#: What the end of a job may take beyond that: the peer probe (1 s), the launcher's poll and teardown.
MARGIN = 5.0
ENV = clean_env(TFDIST_RDZV_TOKEN="failures-0c1d", TFDIST_COLLECTIVE_TIMEOUT=str(COLLECTIVE_TIMEOUT))
_ports = itertools.count(29700)
#: 3 epochs of 5 global batches of 12.
SCRIPT_ARGS = ("--epochs", "3", "--steps", "5")


def random_step() -> int:
    """A step of the 15 to lose a host at: any step must resume exactly (printed, to replay a failure)."""
    step = random.randint(3, 10)
    print(f"the host is lost at step {step}")
    return step


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> np.ndarray:
    """The uninterrupted run's weights: the same script, one plain process (global batch 12)."""
    out = tmp_path_factory.mktemp("single")
    one_process(SCRIPT, str(out), str(out / "ckpt"), *SCRIPT_ARGS)
    return np.load(out / "weights-0.npy")


def launch_on(host: str, *args: str) -> subprocess.Popen[str]:
    return hostcluster.launch_on(host, ENV, *args)


def start_job(
    tmp_path: Path,
    nodes: int,
    nnodes: str,
    *args: str,
    rdzv_timeout: str = "120",
    script_args: tuple[str, ...] = (),
    keras_fit: bool = False,
    only: tuple[int, ...] = (),
    endpoint: str = "",
) -> dict[str, subprocess.Popen[str]]:
    """`tfdist launch` of elastic_fit.py (or, ``keras_fit``, of elastic_keras_fit.py with its backup dir)
    on node1..node<nodes> (the endpoint's node last), or on the nodes numbered ``only``."""
    endpoint = endpoint or f"node1:{next(_ports)}"
    (tmp_path / "out").mkdir(exist_ok=True)
    common = ["--nnodes", nnodes, "--rdzv", endpoint, "--rdzv-timeout", rdzv_timeout, "--cpu", "-n", "1"]
    script = [
        KERAS_SCRIPT if keras_fit else SCRIPT,
        str(tmp_path / "out"),
        str(tmp_path / "ckpt"),
        *(("--epochs", "4") if keras_fit else SCRIPT_ARGS),
        "--pace",
        "0.25",
        *script_args,
    ]
    return {
        f"node{i}": launch_on(
            f"node{i}", *common, "--run-dir", str(tmp_path / f"run-node{i}"), *args, *script
        )
        for i in range(nodes, 0, -1)
        if not only or i in only
    }


def progress(tmp_path: Path) -> int:
    try:
        return int((tmp_path / "out" / "progress").read_text() or 0)
    except (FileNotFoundError, ValueError):
        return 0


def failed(tmp_path: Path, node: str, attempt: int = 0) -> bool:
    """Whether the worker of ``node`` recorded its exception in ``attempt`` (it raised out of a step)."""
    return any((tmp_path / f"run-{node}" / f"attempt-{attempt}").glob("*.error.json"))


def ended_at(tmp_path: Path, node: str, attempt: int = 0, key: str = "ended_at") -> float | None:
    """When (wall clock) ``node``'s launcher ended ``attempt`` (``key="detected_at"``: learnt of its
    failure), from its record, or None yet."""
    try:
        path = tmp_path / f"run-{node}" / f"attempt-{attempt}" / "ended.json"
        return float(json.loads(path.read_text())[key])
    except (FileNotFoundError, ValueError, KeyError, TypeError):
        return None


@pytest.mark.slow  # the CI tier keeps its time budget; ./dev test --all runs it
def test_a_cut_link_ends_the_job_names_the_peer_and_resumes_exactly(
    testhosts: Hosts, reference: np.ndarray, tmp_path: Path
) -> None:
    """node2's link is cut at step 5: both nodes end their attempt (each side's rendezvous connection times
    out, or its collective does), name the other side; with the link back, the job meets again (round 1)
    and ends at the uninterrupted weights."""
    procs = start_job(tmp_path, 2, "2", "--max-restarts", "1")
    try:
        wait_for("step 5", lambda: progress(tmp_path) >= 5, every=0.02)
        testhosts.hosts_script("cut", "node2", check=True)
        cut = time.time()
        wait_for("both attempts ended", lambda: all(ended_at(tmp_path, n) for n in procs))
        ended = {node: (ended_at(tmp_path, node) or 0.0) - cut for node in procs}
        testhosts.hosts_script("plug", "node2", check=True)
        results = dict(zip(procs, finish(list(procs.values())), strict=True))
    finally:
        testhosts.hosts_script("plug", "node2", check=True)
    print(f"cut link: each node's attempt ended {ended} s after the cut (collective timeout 5 s)")
    for node in procs:
        record = json.loads((tmp_path / f"run-{node}" / "attempt-0" / "ended.json").read_text())
        print(f"  {node}: {record['failure']['line']}")
    assert all(seconds <= COLLECTIVE_TIMEOUT + MARGIN for seconds in ended.values()), ended
    for code, output in results.values():
        assert code == 0, output[-3000:]
        assert "(round 1)" in output and "resumed from" in output
    # Each side names the other: its worker's lost-peer probe, or the rendezvous connection's keep-alive.
    silent = "left the job: it stopped answering the rendezvous (TCP keep-alive): host or link down"
    node1, node2 = results["node1"][1], results["node2"][1]
    assert f"lost contact with worker 1 on node2 ({SUBNET}.2:" in node1 or f"node node2 {silent}" in node1
    assert f"lost contact with worker 0 on node1 ({SUBNET}.1:" in node2 or f"node node1 {silent}" in node2
    assert "host or link down" in node1 and "host or link down" in node2
    for rank in range(2):
        assert np.max(np.abs(np.load(tmp_path / "out" / f"weights-{rank}.npy") - reference)) <= 1e-6
    assert testhosts.processes("node1") == [] and testhosts.processes("node2") == []


@pytest.mark.slow
def test_a_host_unreachable_at_the_start(testhosts: Hosts, tmp_path: Path) -> None:
    """node3 is cut before the job starts: node1 and node2 end within the rendezvous timeout naming who
    arrived and how many are missing; node3's own launcher says the endpoint did not answer."""
    testhosts.hosts_script("cut", "node3", check=True)
    try:
        started = time.monotonic()
        procs = start_job(tmp_path, 3, "3", rdzv_timeout="6")
        results = dict(zip(procs, finish(list(procs.values()), timeout=60), strict=True))
        took = time.monotonic() - started
    finally:
        testhosts.hosts_script("plug", "node3", check=True)
    print(f"host unreachable at the start: every node ended {took:.1f} s after the start (rendezvous 6 s)")
    for node in ("node1", "node2"):
        code, output = results[node]
        assert code == 2 and output.count("\n") == 1, output
    # The serving node knows who came; a node whose own timeout ran out first says so.
    assert "only 2 of 3 node(s) arrived at the rendezvous" in results["node1"][1]
    assert "(node1, node2); 1 missing" in results["node1"][1]
    assert "1 missing" in results["node2"][1] or "gave no assignment within 6 s" in results["node2"][1]
    code, output = results["node3"]
    assert code == 2 and "the rendezvous endpoint node1:" in output and "did not answer within 6 s" in output
    assert took < 6 + 15 and not (tmp_path / "ckpt").exists()
    assert all(testhosts.processes(node) == [] for node in ("node1", "node2", "node3"))


@pytest.mark.slow
def test_elastic_three_hosts_lose_one_and_finish_on_two(
    testhosts: Hosts, reference: np.ndarray, tmp_path: Path
) -> None:
    """--nnodes 2:3: node3 loses power at a random step; the rendezvous tells node1 and node2 at once (node3's
    connection to it closed), both stop their workers without waiting for a collective to time out, meet
    again at once, restart from the last checkpoint with the same global batch of 12 (6 per replica
    instead of 4) and end at the uninterrupted run's weights. The time to recover is measured."""
    procs = start_job(tmp_path, 3, "2:3", "--max-restarts", "1")
    step = random_step()
    wait_for(f"step {step}", lambda: progress(tmp_path) >= step, every=0.02)
    testhosts.kill("node3")
    killed, killed_wall = time.monotonic(), time.time()
    wait_for("both attempts ended", lambda: all(ended_at(tmp_path, n) for n in ("node1", "node2")))
    stopped = {n: (ended_at(tmp_path, n) or 0.0) - killed_wall for n in ("node1", "node2")}
    detected = {
        n: (ended_at(tmp_path, n, key="detected_at") or 0.0) - killed_wall for n in ("node1", "node2")
    }
    met = wait_for("round 1", lambda: (tmp_path / "run-node1" / "attempt-1").exists())
    at_restart = progress(tmp_path)
    attempt = tmp_path / "run-node1" / "attempt-1"
    built = wait_for("the strategy", lambda: (attempt / "rank0.strategy.json").exists(), timeout=120)
    log = attempt / "worker0.log"
    resumed = wait_for("the restore", lambda: log.exists() and "resumed from" in log.read_text(), timeout=120)
    stepped = wait_for("a step after the restart", lambda: progress(tmp_path) != at_restart, timeout=120)
    results = dict(zip(procs, finish(list(procs.values())), strict=True))
    times = {
        "detection (both survivors)": max(detected.values()),
        "teardown": max(stopped.values()) - max(detected.values()),
        "rendezvous (both back)": met - killed - max(stopped.values()),
        "start, import TensorFlow, strategy": built - met,
        "model, restore": resumed - built,
        "first step": stepped - resumed,
        "fault to first step": stepped - killed,
    }
    print("host lost, 3 -> 2 nodes: " + ", ".join(f"{k} {v:.1f} s" for k, v in times.items()))
    for node in ("node1", "node2"):
        code, output = results[node]
        assert code == 0, output[-3000:]
        assert "the job goes on with 2 node(s) instead of 3" in output and "(round 1)" in output
        # Told by the rendezvous (node3's launcher is gone), or by its own worker's failed collective.
        assert "node node3 left the job" in output or "lost contact with worker 2" in output, output[-3000:]
    assert results["node3"][0] != 0  # killed with its host
    for rank in range(2):
        run = json.loads((tmp_path / "out" / f"run-{rank}.json").read_text())
        assert run["world"] == 2
        assert np.max(np.abs(np.load(tmp_path / "out" / f"weights-{rank}.npy") - reference)) <= 1e-5
    # Neither survivor waited out the collective timeout: each was told by the rendezvous, or its own
    # worker failed at once (connection refused); no worker's collective timed out.
    for node in ("node1", "node2"):
        record = json.loads((tmp_path / f"run-{node}" / "attempt-0" / "ended.json").read_text())
        assert record["failure"]["name"] in ("node node3", "w0"), record
        for error in (tmp_path / f"run-{node}" / "attempt-0").glob("*.error.json"):
            assert "timed out" not in error.read_text().lower(), error.read_text()
    told = [n for n in ("node1", "node2") if "node node3 left the job" in results[n][1]]
    assert told, "no survivor was told through the rendezvous"
    assert times["rendezvous (both back)"] < 10  # survivors did not wait out the last call (10 s)
    assert all(testhosts.processes(node) == [] for node in ("node1", "node2", "node3"))


def worker_of(hosts: Hosts, host: str) -> int:
    """The PID of the training process on ``host`` (not its launcher)."""
    for pid in hosts.processes(host):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if SCRIPT.encode() in argv and b"launch" not in argv:
            return pid
    raise AssertionError(f"no worker on {host}")


@pytest.mark.slow
def test_a_node_that_joins_late_is_taken_at_the_next_restart(
    testhosts: Hosts, reference: np.ndarray, tmp_path: Path
) -> None:
    """--nnodes 2:3 --grow-every never, formed by node1 and node2; node3 arrives while they train and waits
    (no second job beside the first, no growing); node2's worker dies at a random step; at the restart the
    job goes on with 3 nodes (the global batch of 12 now 4 per replica) and ends at the uninterrupted run's
    weights."""
    endpoint = f"node1:{next(_ports)}"
    args = ("--max-restarts", "1", "--rdzv-last-call", "1", "--grow-every", "never")
    procs = start_job(tmp_path, 3, "2:3", *args, only=(1, 2), endpoint=endpoint)
    wait_for("step 1", lambda: progress(tmp_path) >= 1, every=0.02)
    procs.update(start_job(tmp_path, 3, "2:3", *args, only=(3,), endpoint=endpoint))
    step = random_step() + 2
    wait_for(f"step {step}", lambda: progress(tmp_path) >= step, every=0.02)
    assert procs["node3"].poll() is None  # still waiting for the restart
    assert not (tmp_path / "run-node3").exists() or not any((tmp_path / "run-node3").glob("attempt-*"))
    os.kill(worker_of(testhosts, "node2"), 9)
    results = dict(zip(procs, finish(list(procs.values())), strict=True))
    for node in ("node1", "node2", "node3"):
        code, output = results[node]
        assert code == 0, output[-3000:]
        assert "job of 3 node(s) x 1 worker(s) formed" in output and "(round 1)" in output, output[-3000:]
    assert "the job goes on with 3 node(s) instead of 2" in results["node1"][1]
    for rank in range(3):
        run = json.loads((tmp_path / "out" / f"run-{rank}.json").read_text())
        assert run["world"] == 3
        assert np.max(np.abs(np.load(tmp_path / "out" / f"weights-{rank}.npy") - reference)) <= 1e-5
    assert all(testhosts.processes(node) == [] for node in ("node1", "node2", "node3"))


@pytest.mark.slow
def test_a_global_batch_the_survivors_cannot_divide_is_refused_at_the_restart(
    testhosts: Hosts, tmp_path: Path
) -> None:
    """A global batch of 9 on 3 nodes (3 each); after node3 is lost, 2 replicas cannot share it."""
    procs = start_job(tmp_path, 3, "2:3", "--max-restarts", "1", script_args=("--batch", "9"))
    wait_for("step 3", lambda: progress(tmp_path) >= 3, every=0.02)
    testhosts.kill("node3")
    results = dict(zip(procs, finish(list(procs.values())), strict=True))
    for node in ("node1", "node2"):
        code, output = results[node]
        assert code != 0 and "the job goes on with 2 node(s) instead of 3" in output, output[-3000:]
        assert "ConfigError: global batch 9 is not divisible by the 2 replicas; use 8 or 10." in output
    assert all(testhosts.processes(node) == [] for node in ("node1", "node2", "node3"))


@pytest.mark.slow
def test_two_hosts_lose_one_and_the_job_goes_on_as_one_process(
    testhosts: Hosts, reference: np.ndarray, tmp_path: Path
) -> None:
    """--nnodes 1:2: node2 loses power at a random step; node1 is told at once, meets alone (round 1) and goes
    on as a single worker with the same global batch of 12, to the uninterrupted run's weights."""
    procs = start_job(tmp_path, 2, "1:2", "--max-restarts", "1")
    step = random_step()
    wait_for(f"step {step}", lambda: progress(tmp_path) >= step, every=0.02)
    testhosts.kill("node2")
    results = dict(zip(procs, finish(list(procs.values())), strict=True))
    code, output = results["node1"]
    assert code == 0, output[-3000:]
    assert "the job goes on with 1 node(s) instead of 2" in output and "(round 1)" in output
    run = json.loads((tmp_path / "out" / "run-0.json").read_text())
    assert run["world"] == 1
    assert np.max(np.abs(np.load(tmp_path / "out" / "weights-0.npy") - reference)) <= 1e-5
    assert testhosts.processes("node1") == [] and testhosts.processes("node2") == []


@pytest.fixture(scope="module")
def keras_reference(tmp_path_factory: pytest.TempPathFactory) -> np.ndarray:
    """The plain Keras script's uninterrupted weights: one process, global batch 12, 4 epochs."""
    out = tmp_path_factory.mktemp("keras-single")
    one_process(KERAS_SCRIPT, str(out), str(out / "backup"), "--epochs", "4")
    return np.load(out / "weights-0.npy")


@pytest.mark.slow
@pytest.mark.parametrize("nodes", [3, 2])
def test_model_fit_with_backup_and_restore_loses_a_host_and_goes_on_with_the_rest(
    testhosts: Hosts, keras_reference: np.ndarray, nodes: int, tmp_path: Path
) -> None:
    """A plain model.fit script (BackupAndRestore, no tfdist import) on 3 (or 2) hosts, --nnodes
    2:3 (1:2): the last node loses power in epoch 2 (step 7 of 5-step epochs). The survivors restart on
    one node fewer; BackupAndRestore resumes at the start of epoch 2 (its backup of epoch 1's end), the
    epoch is run again with the same global batch (a larger share per replica; one survivor: the whole
    batch) over the same examples in the same order, so the run ends at the uninterrupted run's weights."""
    left = nodes - 1
    procs = start_job(tmp_path, nodes, f"{left}:{nodes}", "--max-restarts", "1", keras_fit=True)
    wait_for("step 7", lambda: progress(tmp_path) >= 7, every=0.02)
    testhosts.kill(f"node{nodes}")
    results = dict(zip(procs, finish(list(procs.values())), strict=True))
    for node in (f"node{i}" for i in range(1, nodes)):
        code, output = results[node]
        assert code == 0, output[-3000:]
        assert f"the job goes on with {left} node(s) instead of {nodes}" in output and "(round 1)" in output
    for rank in range(left):
        run = json.loads((tmp_path / "out" / f"run-{rank}.json").read_text())
        # Resumed, not started over: the restarted fit ran epochs 2-4 only.
        assert run == {"world": left, "epochs_run": 3}, run
        diff = np.max(np.abs(np.load(tmp_path / "out" / f"weights-{rank}.npy") - keras_reference))
        print(f"model.fit {nodes} -> {left} nodes: weights differ from the uninterrupted run by {diff:.1e}")
        assert diff <= 1e-5
    assert all(testhosts.processes(f"node{i}") == [] for i in range(1, nodes + 1))


@pytest.mark.slow
def test_a_host_slowed_to_10_mbit_is_reported_as_slow_and_the_job_goes_on(
    testhosts: Hosts, tmp_path: Path
) -> None:
    """node2's link is capped at 10 Mbit/s at step 6 of a job that moves ~1 MB per step: every step waits
    for that link (~1 s instead of a fraction), no collective times out, and every worker says once that
    the steps are slow and that node2's link is the slow one; the job finishes."""
    procs = start_job(tmp_path, 3, "3", script_args=("--wide", "512", "--pace", "0"))
    try:
        wait_for("step 6", lambda: progress(tmp_path) >= 6, every=0.02)
        testhosts.hosts_script("cap", "node2", "10mbit", check=True)
        results = dict(zip(procs, finish(list(procs.values())), strict=True))
    finally:
        testhosts.hosts_script("cap", "node2", "off", check=True)
    for node, (code, output) in results.items():
        assert code == 0, output[-3000:]
        slow = [line for line in output.splitlines() if "steps are slow:" in line]
        assert len(slow) == 1, output[-3000:]
        print(f"{node}: {slow[0]}")
        if node == "node2":
            assert "this node's (node2) link is slow" in slow[0]
        else:
            assert "node2 is slow to answer" in slow[0]
        assert "The job goes on" in slow[0]
