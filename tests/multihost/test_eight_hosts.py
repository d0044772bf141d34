"""Eight test hosts, one rank each, through one rendezvous: the jobs of three hosts at eight.

Every host runs the same `tfdist launch --nnodes 8 --rdzv node1:PORT` command; the weights are compared with
the same script in one plain process. A host lost among eight: the seven others form the next round, resume
from the last checkpoint and end at the uninterrupted run's weights; the recovery's phases are printed
(pytest -s). Second tier: eight TensorFlow processes share this machine's cores.
"""

from __future__ import annotations

import itertools
import json
import random
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hostcluster import (
    HOSTS_SCRIPT,
    assert_ranks_equal_one_process,
    clean_env,
    finish,
    launch_on,
    made_hosts,
    one_process,
    wait_for,
)

pytestmark = [pytest.mark.multihost, pytest.mark.slow, pytest.mark.timeout(900)]
HELPERS = Path(__file__).parent.parent / "helpers"
NODES = 8
ENV = {
    **clean_env(TFDIST_RDZV_TOKEN="eight-5e21", TFDIST_COLLECTIVE_TIMEOUT="20"),
    "TFDIST_HOSTS_PREFIX": "tfd8",
    "TFDIST_HOSTS_SUBNET": "10.88.0",
}
_ports = itertools.count(29900)
#: elastic_fit.py's global batch: 8 and 7 ranks both divide it.
BATCH = "56"
ELASTIC_ARGS = ("--epochs", "3", "--steps", "4", "--batch", BATCH)


@pytest.fixture(scope="module")
def hosts() -> Iterator[None]:
    yield from made_hosts(ENV, NODES)


def on_every_host(tmp_path: Path, *args: str, nnodes: str = str(NODES)) -> dict[str, subprocess.Popen[str]]:
    """The same launch on node8..node1 (the endpoint's host last); its run folders under ``tmp_path``."""
    endpoint = f"node1:{next(_ports)}"
    common = ("--nnodes", nnodes, "--rdzv", endpoint, "--rdzv-timeout", "300", "--cpu", "-n", "1")
    return {
        f"node{i}": launch_on(f"node{i}", ENV, *common, "--run-dir", str(tmp_path / f"run-node{i}"), *args)
        for i in range(NODES, 0, -1)
    }


def finished_ok(procs: dict[str, subprocess.Popen[str]], timeout: float = 600) -> dict[str, str]:
    results = dict(zip(procs, finish(list(procs.values()), timeout=timeout), strict=True))
    for node, (code, output) in results.items():
        assert code == 0, (node, output[-3000:])
    return {node: output for node, (_, output) in results.items()}


def test_plain_mwms_script_on_eight_hosts_equals_one_process(hosts: None, tmp_path: Path) -> None:
    """TensorFlow's own MultiWorkerMirroredStrategy script (no tfdist import), 8 workers on 8 hosts."""
    script = str(HELPERS / "plain_mwms.py")
    single, out = tmp_path / "single", tmp_path / "out"
    single.mkdir()
    out.mkdir()
    one_process(script, str(single))
    outputs = finished_ok(on_every_host(tmp_path, script, str(out)))
    summaries = {line for output in outputs.values() for line in output.splitlines() if "formed at" in line}
    assert len(summaries) == 1 and f"job of {NODES} node(s) x 1 worker(s)" in summaries.pop()
    assert all(f"on {NODES} replicas" in output for output in outputs.values())
    assert_ranks_equal_one_process(single, out, NODES)


def test_tfdist_fit_on_the_mpi_backend_on_eight_hosts_equals_one_process(hosts: None, tmp_path: Path) -> None:
    """tfdist.fit, MPI backend: Hydra's proxies started by tfdist on eight hosts, one rank each."""
    probe = str(HELPERS / "fit_probe.py")
    single, out = tmp_path / "single", tmp_path / "out"
    single.mkdir()
    out.mkdir()
    one_process(probe, str(single))
    finished_ok(on_every_host(tmp_path, "--backend", "mpi", probe, str(out)))
    assert_ranks_equal_one_process(single, out, NODES)


def progress(out: Path) -> int:
    try:
        return int((out / "progress").read_text() or 0)
    except (FileNotFoundError, ValueError):
        return 0


def test_a_host_lost_among_eight_the_job_goes_on_with_seven(hosts: None, tmp_path: Path) -> None:
    """--nnodes 7:8: node8 loses power at a random step; the seven others meet again, resume from the last
    checkpoint with the same global batch (8 rows per rank instead of 7) and end at the uninterrupted run's
    weights. The recovery's phases are printed."""
    script = str(HELPERS / "elastic_fit.py")
    single, out, ckpt = tmp_path / "single", tmp_path / "out", tmp_path / "ckpt"
    single.mkdir()
    out.mkdir()
    one_process(script, str(single), str(single / "ckpt"), *ELASTIC_ARGS)
    args = ("--max-restarts", "1", script, str(out), str(ckpt), *ELASTIC_ARGS, "--pace", "0.5")
    procs = on_every_host(tmp_path, *args, nnodes=f"{NODES - 1}:{NODES}")
    step = random.randint(3, 8)
    print(f"the host is lost at step {step}")
    wait_for(f"step {step}", lambda: progress(out) >= step, timeout=600)
    killed = subprocess.run([HOSTS_SCRIPT, "kill", f"node{NODES}"], env=ENV, capture_output=True, timeout=60)
    assert killed.returncode == 0, killed.stderr
    lost = time.monotonic()
    at_fault = progress(out)
    met = wait_for("the next round", lambda: (tmp_path / "run-node1" / "attempt-1").exists(), timeout=300)
    log = tmp_path / "run-node1" / "attempt-1" / "worker0.log"
    resumed = wait_for("the restore", lambda: log.exists() and "resumed from" in log.read_text(), timeout=300)
    stepped = wait_for("a step after the restart", lambda: progress(out) > at_fault, timeout=300)
    print(
        f"host lost, {NODES} -> {NODES - 1} nodes: next round formed {met - lost:.1f} s after the fault, "
        f"restored {resumed - met:.1f} s later, first step {stepped - resumed:.1f} s later "
        f"({stepped - lost:.1f} s fault to first step)"
    )
    survivors = dict(procs)
    lost_node = survivors.pop(f"node{NODES}")
    outputs = finished_ok(survivors)
    lost_node.wait(timeout=60)
    assert lost_node.returncode != 0  # killed with its host
    for output in outputs.values():
        assert f"the job goes on with {NODES - 1} node(s) instead of {NODES}" in output, output[-3000:]
    for rank in range(NODES - 1):
        assert json.loads((out / f"run-{rank}.json").read_text())["world"] == NODES - 1
    assert_ranks_equal_one_process(single, out, NODES - 1)
