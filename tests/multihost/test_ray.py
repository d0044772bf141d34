"""A real Ray cluster on two test hosts (`ray start --head` on node1, `ray start --address` on node2):
`tfdist launch --ray` and Ray Train's TensorflowTrainer, compared with the same training in one process.

One cluster serves every test here (Ray's start-up is slow on 2 cores); it is stopped through the PIDs of
the two `ray start --block` processes and their process trees, and the test hosts are removed.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import psutil
import pytest
from hostcluster import HOSTS_ENV, HOSTS_SCRIPT, PREFIX, SUBNET, Hosts, one_process

from helpers.cli import TFDIST

pytest.importorskip("ray")

HELPERS = Path(__file__).parent.parent / "helpers"
PY = sys.executable
RAY = str(Path(PY).parent / "ray")
PORT = 6390
HEAD = f"{SUBNET}.1:{PORT}"
TEMP = Path(f"/tmp/{PREFIX}-ray")
ENV = {
    **{k: v for k, v in os.environ.items() if not k.startswith(("TF_CONFIG", "SLURM_", "TFDIST_", "RAY_"))},
    **HOSTS_ENV,
    "RAY_USAGE_STATS_ENABLED": "0",
    "TF_CPP_MIN_LOG_LEVEL": "2",
    "TF_ENABLE_ONEDNN_OPTS": "0",
}
#: Small nodes: 2 CPUs each (the machine's cores), 100 MB of object store.
NODE_OPTIONS = ("--num-cpus", "2", "--object-store-memory", "100000000", "--disable-usage-stats", "--block")


@dataclass(frozen=True)
class RayCluster:
    """The two-node Ray cluster: run commands on its hosts."""

    address: str

    def on(self, host: str, *argv: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [HOSTS_SCRIPT, "exec", host, "--", *argv],
            env=ENV,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def launch(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        """`tfdist launch --ray ADDRESS ARGS` from node1."""
        return self.on("node1", *TFDIST, "launch", "--ray-address", self.address, *args, timeout=timeout)


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM each `ray start --block` and, after a grace, SIGKILL what is left of its process tree."""
    for proc in reversed(procs):  # workers first, then the head
        try:
            tree = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
        except psutil.NoSuchProcess:
            continue
        proc.terminate()
        _, alive = psutil.wait_procs(tree, timeout=10)
        for leftover in alive:
            leftover.kill()
        proc.wait(timeout=30)


def _alive_nodes() -> int:
    probe = (
        f"import ray; ray.init(address={HEAD!r}, logging_level='ERROR'); "
        "print('ALIVE', sum(1 for n in ray.nodes() if n['Alive']))"
    )
    proc = subprocess.run(
        [HOSTS_SCRIPT, "exec", "node1", "--", PY, "-c", probe],
        env=ENV,
        capture_output=True,
        text=True,
        timeout=60,
    )
    found = re.search(r"ALIVE (\d+)", proc.stdout)
    return int(found.group(1)) if found else 0


@pytest.fixture(scope="module")
def ray_cluster(testhosts: Hosts) -> Iterator[RayCluster]:
    """Ray's head on node1 and a worker node on node2 of the run's test hosts, for this module."""
    shutil.rmtree(TEMP, ignore_errors=True)  # a crashed run's leftovers
    TEMP.mkdir(parents=True)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for host, role in (
            ("node1", ("--head", "--port", str(PORT), "--include-dashboard", "false")),
            ("node2", ("--address", HEAD)),
        ):
            with open(TEMP / f"{host}.out", "wb") as out:
                procs.append(
                    subprocess.Popen(
                        [
                            HOSTS_SCRIPT,
                            "exec",
                            host,
                            "--",
                            RAY,
                            "start",
                            *role,
                            *NODE_OPTIONS,
                            "--temp-dir",
                            str(TEMP / host),
                        ],
                        env=ENV,
                        stdout=out,
                        stderr=subprocess.STDOUT,
                        cwd=TEMP,
                    )
                )
            if host == "node1":
                time.sleep(3)  # the head's GCS first
        deadline = time.monotonic() + 120
        while _alive_nodes() < 2:
            assert time.monotonic() < deadline, (TEMP / "node2.out").read_text()[-2000:]
            assert all(p.poll() is None for p in procs), (TEMP / "node1.out").read_text()[-2000:]
            time.sleep(1)
        yield RayCluster(HEAD)
    finally:
        _stop(procs)
        shutil.rmtree(TEMP, ignore_errors=True)


def placed_on_both_nodes(output: str) -> None:
    line = next(line for line in output.splitlines() if "placed 2 worker(s)" in line)
    assert f"on {SUBNET}.1" in line and f"on {SUBNET}.2" in line, line


@pytest.mark.slow  # the CI tier keeps its time budget; ./dev test --all runs it
def test_model_fit_script_as_written_matches_one_process(ray_cluster: RayCluster, tmp_path: Path) -> None:
    """The Keras tutorial-style script (plain MWMS + model.fit, no tfdist import) on both Ray nodes."""
    script = str(HELPERS / "keras_fit.py")
    single, out = tmp_path / "single", tmp_path / "out"
    single.mkdir(), out.mkdir()
    one_process(script, str(single), "--plain")
    proc = ray_cluster.launch(
        "-n",
        "2",
        "--cpu",
        "--ray-strategy",
        "strict-spread",
        "--run-dir",
        str(tmp_path / "run"),
        script,
        str(out),
        "--plain",
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    placed_on_both_nodes(proc.stderr)
    assert "[w1]: rank 1: evaluate" in proc.stdout  # prefixed output of the worker on node2
    reference = np.load(single / "rank-0.weights.npy")
    for rank in (0, 1):
        weights = np.load(out / f"rank-{rank}.weights.npy")
        assert np.max(np.abs(weights - reference)) <= 1e-5
    results = [json.loads((out / f"rank-{r}.json").read_text()) for r in (0, 1)]
    assert results[0]["history"] == results[1]["history"]
    assert (tmp_path / "run" / "attempt-0" / "worker1.log").read_text().count("evaluate") == 1
    spans = json.loads((tmp_path / "run" / "attempt-0" / "rank1.strategy.json").read_text())
    assert spans["spans"] is True  # the join check read node2's record


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            ("-n", "5"),
            f"-n 5 workers need 5 CPU (1 per worker) but the Ray cluster at {HEAD} has 4 CPU",
        ),
        pytest.param(
            ("-n", "2", "--ray-gpus", "1"),
            "-n 2 workers need 2 GPU (1 per worker)",
            marks=pytest.mark.slow,
        ),
        pytest.param(
            ("-n", "3", "--ray-strategy", "strict-spread"),
            "only 2 node(s) of the Ray cluster",
            marks=pytest.mark.slow,
        ),
    ],
)
def test_what_the_cluster_cannot_hold_is_one_line_and_nothing_stays_pending(
    ray_cluster: RayCluster, tmp_path: Path, args: tuple[str, ...], expected: str
) -> None:
    proc = ray_cluster.launch(*args, "--run-dir", str(tmp_path / "run"), str(HELPERS / "plain_mwms.py"), "x")
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0] and "Traceback" not in proc.stderr
    assert not (tmp_path / "run").exists()
    groups = ray_cluster.on(
        "node1",
        PY,
        "-c",
        f"import ray; ray.init(address={HEAD!r}, logging_level='ERROR'); "
        "print('STATES', sorted({g['state'] for g in ray.util.placement_group_table().values()}))",
        timeout=60,
    )
    assert "PENDING" not in groups.stdout and "STATES" in groups.stdout, groups.stderr


def test_a_failing_worker_is_the_exit_code_of_the_job(ray_cluster: RayCluster, tmp_path: Path) -> None:
    """Worker 1 (on the second node: spread) exits 7 while worker 0 would run for two minutes."""
    worker = str(HELPERS / "worker.py")
    run_dir = str(tmp_path / "run")
    proc = ray_cluster.launch(
        "-n", "2", "--cpu", "--grace", "2", "--run-dir", run_dir, worker, "exit", "x", "7"
    )
    assert proc.returncode == 7, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "w1 failed first: exited with code 7" in proc.stderr


def test_unreachable_address_is_one_line(ray_cluster: RayCluster, tmp_path: Path) -> None:
    proc = ray_cluster.on(
        "node1",
        *TFDIST,
        "launch",
        "--ray-address",
        f"{SUBNET}.2:6999",
        "-n",
        "2",
        str(HELPERS / "plain_mwms.py"),
        "x",
        timeout=60,
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert (
        len(lines) == 1
        and f"--ray-address {SUBNET}.2:6999: no Ray cluster answers there (Connection refused)" in lines[0]
    )


def test_plain_mwms_custom_loop_matches_one_process(ray_cluster: RayCluster, tmp_path: Path) -> None:
    script = str(HELPERS / "plain_mwms.py")
    single, out = tmp_path / "single", tmp_path / "out"
    single.mkdir(), out.mkdir()
    one_process(script, str(single))
    proc = ray_cluster.launch("-n", "2", "--cpu", "--run-dir", str(tmp_path / "run"), script, str(out))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    placed_on_both_nodes(proc.stderr)  # spread, the default
    reference = np.load(single / "weights-0.npy")
    w0, w1 = np.load(out / "weights-0.npy"), np.load(out / "weights-1.npy")
    assert np.array_equal(w0, w1) and np.max(np.abs(w0 - reference)) <= 1e-5


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["pack", "strict-spread"])
def test_placement_strategies_place_as_named_and_train_the_same(
    ray_cluster: RayCluster, tmp_path: Path, strategy: str
) -> None:
    """pack: both workers on one node (2 CPUs hold them); strict-spread: one per node. Same weights."""
    script = str(HELPERS / "plain_mwms.py")
    single, out = tmp_path / "single", tmp_path / "out"
    single.mkdir(), out.mkdir()
    one_process(script, str(single))
    args = ("-n", "2", "--cpu", "--ray-strategy", strategy, "--run-dir", str(tmp_path / "run"))
    proc = ray_cluster.launch(*args, script, str(out))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    line = next(line for line in proc.stderr.splitlines() if "placed 2 worker(s)" in line)
    nodes = {addr for addr in (f"{SUBNET}.1", f"{SUBNET}.2") if f"on {addr}" in line}
    assert len(nodes) == (1 if strategy == "pack" else 2), line
    reference = np.load(single / "weights-0.npy")
    for rank in range(2):
        assert np.max(np.abs(np.load(out / f"weights-{rank}.npy") - reference)) <= 1e-5


@pytest.mark.slow
def test_killed_worker_restarts_from_the_checkpoint(ray_cluster: RayCluster, tmp_path: Path) -> None:
    """Rank 1 (on node2) SIGKILLs itself in epoch 2 of the first attempt; --max-restarts 1 resumes."""
    script = str(HELPERS / "fit_probe.py")
    whole, resumed = tmp_path / "whole", tmp_path / "resumed"
    whole.mkdir(), resumed.mkdir()
    common = ("-n", "2", "--cpu", "--ray-strategy", "strict-spread", "--grace", "2")
    proc = ray_cluster.launch(*common, "--run-dir", str(tmp_path / "run0"), script, str(whole))
    assert proc.returncode == 0, proc.stderr[-3000:]
    proc = ray_cluster.launch(
        *common,
        "--max-restarts",
        "1",
        "--run-dir",
        str(tmp_path / "run1"),
        script,
        str(resumed),
        "--checkpoint",
        str(tmp_path / "ckpt"),
        "--crash",
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "w1 failed first: killed by SIGKILL" in proc.stderr and "restarting all workers" in proc.stderr
    assert (tmp_path / "run1" / "attempt-1" / "worker1.log").is_file()
    final = np.load(resumed / "weights-0.npy")
    assert np.max(np.abs(final - np.load(whole / "weights-0.npy"))) <= 1e-6
    assert json.loads((resumed / "history-0.json").read_text())["steps"] == 12


@pytest.mark.slow
@pytest.mark.parametrize("route", ["config", "strategy", "fit"])
def test_tensorflow_trainer_matches_one_process(ray_cluster: RayCluster, tmp_path: Path, route: str) -> None:
    """Ray Train's TensorflowTrainer, Keras 3: tfdist's TensorflowConfig with an unchanged training function
    (MWMS + model.fit), or Ray's own config with tfdist.strategy() (model.fit, or tfdist.fit)."""
    helper = str(HELPERS / "ray_trainer.py")
    single, out = tmp_path / "single", tmp_path / "out"
    single.mkdir(), out.mkdir()
    one_process(helper, str(single), "--route", "single")
    proc = ray_cluster.on("node1", PY, helper, str(out), "--route", route, "--address", HEAD)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    reference = np.load(single / "rank-0.weights.npy")
    expected = json.loads((single / "rank-0.json").read_text())
    for rank in (0, 1):
        assert np.max(np.abs(np.load(out / f"rank-{rank}.weights.npy") - reference)) <= 1e-5
        got = json.loads((out / f"rank-{rank}.json").read_text())
        for key, value in expected["evaluate"].items():
            assert abs(got["evaluate"][key] - value) <= 1e-5, (rank, key)
        if route != "fit":  # model.fit's history, epoch by epoch (tfdist.fit's is checked elsewhere)
            for key, values in expected["history"].items():
                assert np.allclose(got["history"][key], values, atol=1e-5, rtol=0), (rank, key)
        predicted = np.load(out / f"rank-{rank}.predict.npy")
        assert np.max(np.abs(predicted - np.load(single / "rank-0.predict.npy"))) <= 1e-5
    on_node2 = rf"RayTrainWorker pid=\d+, ip={re.escape(SUBNET)}\.2\)"
    assert re.search(on_node2, proc.stdout + proc.stderr)  # one worker ran on node2
