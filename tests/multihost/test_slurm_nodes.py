"""Every kind of script as one Slurm job across test hosts, each equal to the same script in one process.

The cluster is real: slurmctld on node1 and one slurmd per host, each host a network namespace with its own
address and hostname; jobs are submitted from node1 as from a login node. Tasks on different nodes talk over
the test switch (TensorFlow's gRPC, or MPI started through ``srun --mpi=pmi2``).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from hostcluster import FINAL, Cluster, one_process

ROOT = Path(__file__).parent.parent.parent
HELPERS = ROOT / "tests" / "helpers"
PY = sys.executable


def finished(cluster: Cluster, job_id: str, run_dir: Path, timeout: float = 420) -> str:
    """Wait for the job; assert it COMPLETED; return its output."""
    output = run_dir / f"slurm-{job_id}.out"
    try:
        job = cluster.wait(job_id, FINAL, timeout)
    except AssertionError as stuck:  # say what the job printed, then let it go
        cluster.on("node1", "scancel", job_id, timeout=30)
        log = output.read_text() if output.exists() else "(no output)"
        raise AssertionError(f"{stuck}\n--- the job's output ---\n{log[-4000:]}") from None
    log = output.read_text()
    assert job["JobState"] == "COMPLETED", log[-4000:]
    return log


def max_diff(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.max(np.abs(a - b)))


def nodes_of(cluster: Cluster, job_id: str) -> str:
    return cluster.job(job_id)["NodeList"]


# Second tier: the first tier's script without tfdist across Slurm nodes is the model.fit one below (the same
# path: the task wrapper's TF_CONFIG); test_one_launcher_per_node_forms_one_job runs this one.
@pytest.mark.slow
@pytest.mark.parametrize("nodes", [2, 3])
def test_plain_mwms_custom_loop_across_nodes(
    cluster: Cluster, nodes: int, one_process_reference: Callable[..., Path], tmp_path: Path
) -> None:
    """The TensorFlow tutorial's custom loop (no tfdist import), one task per node."""
    script = str(HELPERS / "plain_mwms.py")
    single, out = one_process_reference(script), tmp_path / "out"
    out.mkdir()
    job_id = cluster.submit(
        tmp_path / "run", PY, script, str(out), options=("--nodes", str(nodes), "--ntasks-per-node", "1")
    )
    log = finished(cluster, job_id, tmp_path / "run")
    assert nodes_of(cluster, job_id) == f"node[1-{nodes}]"
    assert log.count(f"on {nodes} replicas") == nodes  # every task joined one job spanning the nodes
    reference = np.load(single / "weights-0.npy")
    for rank in range(nodes):
        assert max_diff(np.load(out / f"weights-{rank}.npy"), reference) <= 1e-5


def test_keras_model_fit_across_two_nodes(
    cluster: Cluster, one_process_reference: Callable[..., Path], tmp_path: Path
) -> None:
    """model.fit / evaluate / predict under MultiWorkerMirroredStrategy (no tfdist import) on 2 hosts."""
    script = str(HELPERS / "keras_fit.py")
    single, out = one_process_reference(script, "--plain", "--epochs", "2"), tmp_path / "out"
    out.mkdir()
    job_id = cluster.submit(
        tmp_path / "run",
        PY,
        script,
        str(out),
        "--plain",
        "--epochs",
        "2",
        options=("--nodes", "2", "--ntasks-per-node", "1"),
    )
    finished(cluster, job_id, tmp_path / "run")
    assert nodes_of(cluster, job_id) == "node[1-2]"
    ref = json.loads((single / "rank-0.json").read_text())
    for rank in range(2):
        assert (
            max_diff(np.load(out / f"rank-{rank}.weights.npy"), np.load(single / "rank-0.weights.npy"))
            <= 1e-5
        )
        info = json.loads((out / f"rank-{rank}.json").read_text())
        for key, values in ref["history"].items():
            assert np.allclose(info["history"][key], values, atol=1e-5, rtol=0), key
        for key, value in ref["evaluate"].items():
            assert abs(info["evaluate"][key] - value) <= 1e-5, key
        preds = np.load(out / f"rank-{rank}.predictions.npy")
        assert np.allclose(preds, np.load(single / "rank-0.predictions.npy"), atol=1e-5, rtol=0)


@pytest.mark.slow  # the first tier: 2 x 2 MPI ranks through --rdzv (test_rendezvous.py); Horovod's API below
def test_mpi_backend_two_tasks_on_each_of_two_nodes(
    cluster: Cluster, one_process_reference: Callable[..., Path], tmp_path: Path
) -> None:
    """tfdist.strategy() + tfdist.fit, ranks through srun --mpi=pmi2: shared memory inside each node, MPI
    across them."""
    probe = str(HELPERS / "fit_probe.py")
    single, out = one_process_reference(probe), tmp_path / "out"
    out.mkdir()
    job_id = cluster.submit(
        tmp_path / "run",
        PY,
        probe,
        str(out),
        options=("--nodes", "2", "--ntasks-per-node", "2", "--backend", "mpi"),
    )
    log = finished(cluster, job_id, tmp_path / "run")
    script = (tmp_path / "run" / "job.sbatch").read_text()
    assert "srun --ntasks-per-node=2 --mpi=pmi2" in script
    assert "local size 2, cross size 2): shared memory within a node, MPI across nodes" in log
    reference = np.load(single / "weights-0.npy")
    for rank in range(4):
        assert max_diff(np.load(out / f"weights-{rank}.npy"), reference) <= 1e-5


# The first tier: srun --mpi=pmi2 across nodes in test_unchanged_horovod_keras_script_across_two_nodes.
@pytest.mark.slow
def test_mpi_backend_from_a_hand_written_sbatch(
    cluster: Cluster, one_process_reference: Callable[..., Path], tmp_path: Path
) -> None:
    """What an HPC guide writes: #SBATCH lines, srun --mpi=pmi2 and the script; no tfdist wrapper."""
    out, run = tmp_path / "out", tmp_path / "run"
    for d in (out, run):
        d.mkdir()
    probe = str(HELPERS / "fit_probe.py")
    single = one_process_reference(probe)
    script = run / "train.sbatch"
    script.write_text(
        "#!/bin/bash\n"
        "#SBATCH --nodes=2\n"
        "#SBATCH --ntasks-per-node=2\n"
        f"#SBATCH --output={run}/slurm-%j.out\n"
        "export TFDIST_BACKEND=mpi\n"
        f"srun --mpi=pmi2 {PY} {probe} {out}\n"
    )
    proc = cluster.on("node1", "sbatch", "--parsable", str(script))
    assert proc.returncode == 0, proc.stderr
    job_id = proc.stdout.strip()
    log = finished(cluster, job_id, run)
    assert "local size 2, cross size 2" in log
    reference = np.load(single / "weights-0.npy")
    for rank in range(4):
        assert max_diff(np.load(out / f"weights-{rank}.npy"), reference) <= 1e-5


@pytest.mark.parametrize(
    ("backend", "script"),
    # The first tier: one launcher per node in test_k8s_pods.py (pods run tfdist launch), Slurm across nodes
    # in test_keras_model_fit_across_two_nodes.
    [
        pytest.param("tf", "plain_mwms.py", marks=pytest.mark.slow),
        pytest.param("mpi", "fit_probe.py", marks=pytest.mark.slow),
    ],
)
def test_one_launcher_per_node_forms_one_job(
    cluster: Cluster, one_process_reference: Callable[..., Path], tmp_path: Path, backend: str, script: str
) -> None:
    """As torchrun under srun: ``srun --ntasks-per-node=1 tfdist launch -n 2 train.py`` in a hand-written
    sbatch; each launcher reads its node and peers from the step and starts 2 workers: 4 ranks, one job."""
    out, run = tmp_path / "out", tmp_path / "run"
    for d in (out, run):
        d.mkdir()
    path = str(HELPERS / script)
    single = one_process_reference(path)
    job = run / "train.sbatch"
    job.write_text(
        "#!/bin/bash\n"
        "#SBATCH --nodes=2\n"
        "#SBATCH --ntasks-per-node=1\n"
        f"#SBATCH --output={run}/slurm-%j.out\n"
        f"srun {PY} -m tfdist launch -n 2 --cpu --backend {backend} --run-dir {run}/logs {path} {out}\n"
    )
    proc = cluster.on("node1", "sbatch", "--parsable", str(job))
    assert proc.returncode == 0, proc.stderr
    job_id = proc.stdout.strip()
    log = finished(cluster, job_id, run)
    assert nodes_of(cluster, job_id) == "node[1-2]"
    # Both launchers print the same job, read from the step's variables.
    summary = [line for line in log.splitlines() if "node(s) x 2 worker(s) formed at the slurm job" in line]
    assert len(summary) == 2 and summary[0] == summary[1] and "node 1 node2 (node2)" in summary[0]
    if backend == "mpi":
        assert "local size 2, cross size 2" in log
    else:
        assert log.count("on 4 replicas") == 4
    reference = np.load(single / "weights-0.npy")
    written = sorted(out.glob("weights-*.npy"))
    assert written and all(max_diff(np.load(w), reference) <= 1e-5 for w in written)


@pytest.mark.slow
def test_tfdist_train_picks_the_fastest_backend_across_nodes(cluster: Cluster, tmp_path: Path) -> None:
    """`tfdist slurm submit -- tfdist train`: the backend is chosen at submission and said in one line."""
    # big-gradient: every step all-reduces a 16 MB gradient (and, unlike mnist-cnn, it has no dropout,
    # whose masks differ between one process and four).
    train = ("--workload", "big-gradient", "--epochs", "2", "--steps-per-epoch", "6", "--lr", "0.02")
    proc = cluster.tfdist(
        "slurm",
        "submit",
        "--nodes",
        "2",
        "--ntasks-per-node",
        "2",
        "--run-dir",
        str(tmp_path / "run"),
        "--",
        PY,
        "-m",
        "tfdist",
        "train",
        *train,
        "--batch-size-per-replica",
        "16",
        "--run-dir",
        str(tmp_path / "out"),
    )
    assert proc.returncode == 0, proc.stderr
    said = [line for line in proc.stderr.splitlines() if line.startswith("tfdist slurm: backend")]
    assert len(said) == 1 and said[0].startswith("tfdist slurm: backend mpi: CPU only"), proc.stderr
    job_id = proc.stdout.split()[2].rstrip(";")
    received_before = cluster.received_bytes("node2")
    log = finished(cluster, job_id, tmp_path / "run")
    assert "4 worker(s)" in log and "local size 2, cross size 2" in log
    # The cross-node level went over the test switch: at least half of the 16 MB gradient reached node2 at
    # each of the 12 steps (real machines' traffic, not the shared memory of the one kernel they share).
    assert cluster.received_bytes("node2") - received_before >= 12 * 8e6
    nodes = json.loads((tmp_path / "out" / "metrics.json").read_text())
    one_process(
        "-m",
        "tfdist",
        "train",
        *train,
        "--batch-size-per-replica",
        "64",
        "--run-dir",
        str(tmp_path / "one"),
    )
    one = json.loads((tmp_path / "one" / "metrics.json").read_text())
    assert nodes["summary"]["backend"] == "mpi" and nodes["summary"]["global_batch"] == 64
    for key in ("loss", "val_loss", "accuracy"):
        assert np.allclose(nodes["history"][key], one["history"][key], atol=1e-5, rtol=0), key


def test_unchanged_horovod_keras_script_across_two_nodes(
    cluster: Cluster, one_process_reference: Callable[..., Path], tmp_path: Path
) -> None:
    """`import horovod.tensorflow.keras as hvd` as in Horovod's Keras example, 2 nodes x 1 rank."""
    script = str(HELPERS / "hvd_keras.py")
    out, single = tmp_path / "out", one_process_reference(script, "--batch", "64", "--lr-ranks", "2")
    proc = cluster.tfdist(
        "slurm",
        "submit",
        "--nodes",
        "2",
        "--ntasks-per-node",
        "1",
        "--backend",
        "horovod",
        "--run-dir",
        str(tmp_path / "run"),
        "--",
        PY,
        script,
        str(out),
        "--import",
        "horovod",
    )
    assert proc.returncode == 0, proc.stderr
    job_id = proc.stdout.split()[2].rstrip(";")
    finished(cluster, job_id, tmp_path / "run")
    assert nodes_of(cluster, job_id) == "node[1-2]"
    ref = np.load(single / "rank0.npz")
    for rank in range(2):
        got = np.load(out / f"rank{rank}.npz")
        assert max(max_diff(got[k], ref[k]) for k in ref.files) <= 1e-5
    assert np.allclose(
        json.loads((out / "history-0.json").read_text())["loss"],
        json.loads((single / "history-0.json").read_text())["loss"],
        atol=1e-5,
    )


TRAIN_96 = (PY, "-m", "tfdist", "train", "--global-batch-size", "96", "--epochs", "1")


@pytest.mark.parametrize(
    ("options", "command", "expected"),
    [
        (
            ("--nodes", "4"),
            (PY, "-c", "pass"),
            "sbatch refused the job: Requested node configuration is not available",
        ),
        (("--nodelist", "node9"), (PY, "-c", "pass"), "sbatch refused the job: Invalid node name specified"),
        (
            ("--nodes", "2", "--ntasks-per-node", "5"),
            TRAIN_96,
            "--global-batch-size=96 (in the job's command) is not divisible by the 10 replicas of "
            "2 node(s) (--nodes=2) x --ntasks-per-node=5",
        ),
    ],
)
def test_a_job_slurm_cannot_run_is_one_line_and_leaves_nothing(
    cluster: Cluster, options: tuple[str, ...], command: tuple[str, ...], expected: str, tmp_path: Path
) -> None:
    run = tmp_path / "run"
    proc = cluster.tfdist("slurm", "submit", "--run-dir", str(run), *options, "--", *command)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and expected in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and not run.exists()


def test_a_peer_name_that_resolves_to_loopback_is_one_line_not_a_hang(
    cluster: Cluster, tmp_path: Path
) -> None:
    """Every node's hosts file carries "127.0.1.1 node2" (an image made on node2): node1 would dial itself.
    The task on node1 says so in one line and the job ends at once instead of waiting for a timeout."""
    out = tmp_path / "out"
    out.mkdir()
    assert cluster.hosts_script("loopback-name", "node2", "on").returncode == 0
    try:
        job_id = cluster.submit(
            tmp_path / "run",
            PY,
            str(HELPERS / "plain_mwms.py"),
            str(out),
            options=("--nodes", "2", "--ntasks-per-node", "1", "--nodelist", "node[1-2]"),
        )
        job = cluster.wait(job_id, FINAL, 120)
    finally:
        cluster.hosts_script("loopback-name", "node2", "off")
    log = (tmp_path / "run" / f"slurm-{job_id}.out").read_text()
    assert job["JobState"] == "FAILED", log[-3000:]
    errors = [line for line in log.splitlines() if line.startswith("tfdist run: error:")]
    assert errors == [
        "tfdist run: error: node 'node2', another node of this job, resolves to 127.0.1.1 (loopback) on "
        "node1, so this task cannot reach it. Hint: map node2 to its network address in /etc/hosts on node1 "
        "(or fix DNS), then resubmit."
    ]
    assert "Traceback" not in log and not list(out.iterdir())
