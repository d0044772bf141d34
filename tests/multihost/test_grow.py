"""A job that grows: a test host arrives while the job runs on another and joins it at a step boundary
(no failure, no restart spent), then the job shrinks back when that host loses power; the weights are the
uninterrupted run's. Every node runs `tfdist launch --nnodes 1:2 --rdzv node1:PORT` on its own test host.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import hostcluster
import numpy as np
import pytest
from hostcluster import Hosts, clean_env, finish, one_process, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
HELPERS = Path(__file__).parent.parent / "helpers"
FIT = str(HELPERS / "elastic_fit.py")
KERAS_FIT = str(HELPERS / "elastic_keras_fit.py")
ENV = clean_env(TFDIST_RDZV_TOKEN="grow-5e1f", TFDIST_COLLECTIVE_TIMEOUT="5")
_ports = itertools.count(29760)
#: 4 epochs of 6 global batches of 12, a step every half second at least: time for a host to arrive.
FIT_ARGS = ("--epochs", "4", "--steps", "6")


def progress(out: Path) -> int:
    """The last finished global step, as rank 0 wrote it."""
    try:
        return int((out / "progress").read_text() or 0)
    except (FileNotFoundError, ValueError):
        return 0


@contextlib.contextmanager
def told_on_failure(procs: dict[str, subprocess.Popen[str]]) -> Iterator[None]:
    """A wait that fails ends the launchers and shows what each printed."""
    try:
        yield
    except AssertionError:
        for name, (code, output) in zip(procs, finish(list(procs.values()), timeout=5), strict=True):
            print(f"--- {name} (exit code {code}):\n{output[-4000:]}")
        raise


def start(host: str, tmp_path: Path, endpoint: str, script: list[str], *args: str) -> subprocess.Popen[str]:
    return hostcluster.launch_on(
        host,
        ENV,
        *("--nnodes", "1:2", "--rdzv", endpoint, "--rdzv-timeout", "120", "--cpu", "-n", "1"),
        *("--run-dir", str(tmp_path / f"run-{host}"), *args, *script),
    )


def test_tfdist_fit_grows_from_one_host_to_two_and_back_and_ends_at_the_uninterrupted_weights(
    testhosts: Hosts, tmp_path: Path
) -> None:
    """node1 trains alone; node2 arrives at step 3 and joins at the next step boundary (the global batch of
    12 now 6 per replica, the data position kept); node2 loses power 4 steps later and node1 finishes
    alone. `--max-restarts 1` is spent by the loss only: growing spent none."""
    single = tmp_path / "single"
    single.mkdir()
    one_process(FIT, str(single), str(single / "ckpt"), *FIT_ARGS)
    out, endpoint = tmp_path / "out", f"node1:{next(_ports)}"
    out.mkdir()
    script = [FIT, str(out), str(tmp_path / "ckpt"), *FIT_ARGS, "--pace", "0.5"]
    procs = {"node1": start("node1", tmp_path, endpoint, script, "--max-restarts", "1")}
    wait_for("step 3", lambda: progress(out) >= 3, every=0.02)
    procs["node2"] = start("node2", tmp_path, endpoint, script, "--max-restarts", "1")
    arrived = time.monotonic()
    grown = tmp_path / "run-node1" / "attempt-1"
    with told_on_failure(procs):
        wait_for("the grown job", grown.exists, every=0.02)
        at_grow = progress(out)
        stepped = wait_for("a step of the grown job", lambda: progress(out) > at_grow, every=0.02)
        wait_for("4 more steps", lambda: progress(out) >= at_grow + 4, every=0.02)
    print(f"1 -> 2 nodes: from node2's launch to the grown job's first step {stepped - arrived:.1f} s")
    testhosts.kill("node2")
    (code, output), (code2, _) = finish([procs["node1"], procs["node2"]])
    assert code == 0, output[-4000:]
    assert code2 != 0  # killed with its host
    assert "node node2 waits to join: the job grows to 2 node(s) at the next step boundary." in output, (
        output[-4000:]
    )
    assert "the job goes on with 2 node(s) instead of 1" in output
    assert "the job goes on with 1 node(s) instead of 2" in output
    assert "restart 1/1" in output and "gave up" not in output  # the loss spent the only restart
    assert json.loads((out / "run-0.json").read_text())["world"] == 1
    reference = np.load(single / "weights-0.npy")
    assert np.max(np.abs(np.load(out / "weights-0.npy") - reference)) <= 1e-5
    assert all(testhosts.processes(node) == [] for node in ("node1", "node2"))


def test_model_fit_with_backup_and_restore_grows_at_an_epochs_end(testhosts: Hosts, tmp_path: Path) -> None:
    """A plain model.fit script (MultiWorkerMirroredStrategy, BackupAndRestore, no tfdist import) on node1;
    node2 arrives in epoch 1 and the job grows at that epoch's end, after the backup; both workers run the
    remaining epochs on the same global batch and end at the uninterrupted run's weights."""
    single = tmp_path / "single"
    single.mkdir()
    one_process(KERAS_FIT, str(single), str(single / "backup"), "--epochs", "4")
    out, endpoint = tmp_path / "out", f"node1:{next(_ports)}"
    out.mkdir()
    script = [KERAS_FIT, str(out), str(tmp_path / "backup"), "--epochs", "4", "--pace", "0.5"]
    procs = [start("node1", tmp_path, endpoint, script)]
    wait_for("step 1", lambda: progress(out) >= 1, every=0.02)
    procs.append(start("node2", tmp_path, endpoint, script))
    results = finish(procs)
    for code, output in results:
        assert code == 0, output[-4000:]
    assert "the job goes on with 2 node(s) instead of 1" in results[0][1], results[0][1][-4000:]
    reference = np.load(single / "weights-0.npy")
    for rank in range(2):
        run = json.loads((out / f"run-{rank}.json").read_text())
        assert run["world"] == 2 and run["epochs_run"] < 4, run  # resumed, not started over
        assert np.max(np.abs(np.load(out / f"weights-{rank}.npy") - reference)) <= 1e-5


@pytest.mark.parametrize(
    ("script", "last"),
    [
        (["hvd_elastic_keras_mnist.py"], {"epoch": 3}),
        (["hvd_elastic_mnist.py"], {}),
        (
            [
                *("hvd_elastic_synthetic_benchmark.py", "--no-cuda", "--model", "MobileNetV2"),
                *("--image-size", "32", "--batch-size", "4", "--num-warmup-batches", "2"),
                *("--num-batches-per-iter", "2", "--num-iters", "3"),
            ],
            {"warm": True},
        ),
    ],
    ids=["keras_mnist", "mnist", "synthetic_benchmark"],
)
def test_horovods_elastic_examples_lose_a_host_and_grow_back_from_their_commits(
    script: list[str], last: dict[str, object], testhosts: Hosts, tmp_path: Path
) -> None:
    """Horovod's three elastic TensorFlow 2 examples as written (offline data), `--backend horovod --nnodes
    1:2` on node1 and node2: node2 loses power after the 3rd commit and rank 0 goes on alone from its last
    commit (the one restart); node2 is started again and the job grows back at the next commit (no restart
    spent), resuming from it; both ranks end with the same weights."""
    out, endpoint = tmp_path / "out", f"node1:{next(_ports)}"
    out.mkdir()
    env = {**ENV, "HVD_ELASTIC_OUT": str(out), "HVD_ELASTIC_PACE": "1.0"}
    script = [str(HELPERS / script[0]), *script[1:]]

    def horovod(host: str) -> subprocess.Popen[str]:
        return hostcluster.launch_on(
            host,
            env,
            *("--backend", "horovod", "--nnodes", "1:2", "--rdzv", endpoint, "--rdzv-timeout", "120"),
            *(
                "--cpu",
                "-n",
                "1",
                "--max-restarts",
                "1",
                "--run-dir",
                str(tmp_path / f"run-{host}-{time.time()}"),
            ),
            *script,
            cwd=tmp_path,  # the examples write their checkpoints to the working directory
        )

    def commits() -> int:
        try:
            return int((out / "commits").read_text() or 0)
        except (FileNotFoundError, ValueError):
            return 0

    first = {"node1": horovod("node1"), "node2": horovod("node2")}
    with told_on_failure(first):
        wait_for("3 commits", lambda: commits() >= 3, timeout=180, every=0.02)
        testhosts.kill("node2")
        wait_for("a commit on one rank", lambda: commits() >= 5, timeout=180, every=0.02)
    back = horovod("node2")
    (code, output), (lost, _), (code2, output2) = finish([first["node1"], first["node2"], back])
    assert code == 0 and code2 == 0, output[-4000:] + output2[-4000:]
    assert lost != 0  # killed with its host
    assert "restart 1/1" in output and "node node2 waits to join: the job grows to 2 node(s)" in output
    assert output.count("resuming from the last commit") >= 2, output[-4000:]
    w0, w1 = (np.load(out / f"rank{rank}.npz") for rank in (0, 1))
    assert all(np.array_equal(w0[k], w1[k]) for k in w0.files) and len(w0.files) > 4
    final = [json.loads(line) for line in (out / "rank0.jsonl").read_text().splitlines()][-1]
    assert last.items() <= final["objects"].items() and final["attempt"] == 2, final


def test_a_job_whose_global_batch_would_not_divide_keeps_its_size_and_says_why(
    testhosts: Hosts, tmp_path: Path
) -> None:
    """A global batch of 9 on one node: 2 replicas could not share it, so when node2 arrives the job says
    so in one line and goes on alone; node2 is told why at once and ends."""
    out, endpoint = tmp_path / "out", f"node1:{next(_ports)}"
    out.mkdir()
    script = [FIT, str(out), str(tmp_path / "ckpt"), *FIT_ARGS, "--pace", "0.25", "--batch", "9"]
    first = start("node1", tmp_path, endpoint, script)
    wait_for("step 2", lambda: progress(out) >= 2, every=0.02)
    (code2, output2), (code, output) = finish([start("node2", tmp_path, endpoint, script), first])
    assert code == 0, output[-4000:]
    assert (
        "tfdist launch: node node2 waits to join: the job grows to 2 node(s); not while it runs: global "
        "batch 9 is not divisible by 2 replicas. The job keeps its 1 node(s)."
    ) in output, output[-4000:]
    assert code2 != 0 and "cannot take node node2 while it runs: global batch 9 is not divisible" in output2
    assert json.loads((out / "run-0.json").read_text())["world"] == 1
