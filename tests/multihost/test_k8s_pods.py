"""The pods of `tfdist k8s manifest`, emulated on test hosts: each host is named and resolvable as its pod
would be (train-0.train, ...), gets the variables Kubernetes gives that pod (JOB_COMPLETION_INDEX, HOSTNAME)
plus the manifest's own, and runs the manifest's container command as written. The pods form one job: a
plain `model.fit` script (no tfdist import) ends with the weights and history of the same script in one
process. No Kubernetes runs here: what a cluster adds (scheduling, DNS, restarts) is not exercised.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from hostcluster import HOSTS_ENV, HOSTS_SCRIPT, SUBNET, Hosts

from helpers.cli import tfdist

HELPERS = Path(__file__).parent.parent / "helpers"
#: The pod names each test host answers to: an Indexed Job's, a JobSet's, and a TFJob's (operator's names).
ALIASES = {
    "node1": ("train-0.train", "train-worker-0-0.train", "train-worker-0.default.svc"),
    "node2": ("train-1.train", "train-worker-0-1.train", "train-worker-1.default.svc"),
}
#: What the shell running the tests has that a pod would not.
LEAKY = ("TF_CONFIG", "SLURM_", "TFDIST_", "CUDA_VISIBLE_DEVICES", "OMPI_", "PMI_", "PMIX_", "JOB_COMPLETION")


@pytest.fixture(scope="module")
def hosts(testhosts: Hosts) -> Iterator[Hosts]:
    """The run's test hosts, node1 and node2 also answering to their pod names (until the module ends)."""
    try:
        for host, names in ALIASES.items():
            named = testhosts.hosts_script("alias", host, *names)
            assert named.returncode == 0, named.stderr
        yield testhosts
    finally:
        for host in ALIASES:
            testhosts.hosts_script("alias", host)


def test_each_host_answers_to_its_pod_names(hosts: Hosts) -> None:
    proc = hosts.on("node1", "getent", "hosts", "train-1.train", "train-worker-0-1.train", timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert [line.split()[0] for line in proc.stdout.splitlines()] == [f"{SUBNET}.2", f"{SUBNET}.2"]


def pod_container(*manifest_flags: str, command: tuple[str, ...]) -> dict[str, Any]:
    """The container of the workload `tfdist k8s manifest FLAGS -- COMMAND` writes."""
    proc = tfdist("k8s", "manifest", "--image", "unused:1", *manifest_flags, "--", *command, timeout=60)
    assert proc.returncode == 0, proc.stderr
    workload = list(yaml.safe_load_all(proc.stdout))[-1]
    if workload["kind"] == "Job":
        template = workload["spec"]["template"]
    elif workload["kind"] == "JobSet":
        template = workload["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    else:
        template = workload["spec"]["tfReplicaSpecs"]["Worker"]["template"]
    [container] = template["spec"]["containers"]
    return dict(container)


def run_pods(container: dict[str, Any], pods: dict[str, dict[str, str]], timeout: float = 400) -> list[str]:
    """The container's command on each host (host -> what Kubernetes adds to the pod), at the same time."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(LEAKY)}
    # The image's `python` is the one with tfdist installed, as in the manifest's command.
    base["PATH"] = f"{Path(sys.executable).parent}:{base.get('PATH', '')}"
    base.update({item["name"]: item["value"] for item in container.get("env", [])})
    procs = []
    for host, pod_env in pods.items():
        output = tempfile.TemporaryFile("w+")  # noqa: SIM115 (closed below)
        proc = subprocess.Popen(
            [HOSTS_SCRIPT, "exec", host, "--", *container["command"]],
            env={**base, **HOSTS_ENV, **pod_env},
            stdout=output,
            stderr=subprocess.STDOUT,
            text=True,
        )
        procs.append((proc, output))
    deadline = time.monotonic() + timeout
    outputs = []
    for proc, output in procs:
        try:
            proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)
        output.seek(0)
        text = output.read()
        output.close()
        assert proc.returncode == 0, text[-3000:]
        outputs.append(text)
    return outputs


def assert_same_as_one_process(single: Path, out: Path, ranks: int) -> None:
    ref = json.loads((single / "rank-0.json").read_text())
    reference = np.load(single / "rank-0.weights.npy")
    for rank in range(ranks):
        assert np.max(np.abs(np.load(out / f"rank-{rank}.weights.npy") - reference)) <= 1e-5
        history = json.loads((out / f"rank-{rank}.json").read_text())["history"]
        for key, values in ref["history"].items():
            assert np.allclose(history[key], values, atol=1e-5, rtol=0), key


@pytest.fixture
def fit(one_process_reference: Callable[..., Path], tmp_path: Path) -> tuple[Path, Path, tuple[str, ...]]:
    """keras_fit.py's run in one process, the pods' output directory, and the pods' command."""
    out, args = tmp_path / "out", ("--plain", "--epochs", "2")
    out.mkdir()
    single = one_process_reference(HELPERS / "keras_fit.py", *args)
    return single, out, ("python", str(HELPERS / "keras_fit.py"), str(out), *args)


@pytest.mark.slow  # the CI tier keeps its time budget; ./dev test --all runs it
def test_indexed_job_pods_run_model_fit_as_one_job(
    hosts: Hosts, fit: tuple[Path, Path, tuple[str, ...]], tmp_path: Path
) -> None:
    single, out, command = fit
    container = pod_container("--pods", "2", "--name", "train", command=command)
    received = hosts.received_bytes("node2")
    run_pods(
        container,
        {
            "node1": {"JOB_COMPLETION_INDEX": "0", "HOSTNAME": "train-0"},
            "node2": {"JOB_COMPLETION_INDEX": "1", "HOSTNAME": "train-1"},
        },
    )
    assert hosts.received_bytes("node2") - received > 10_000  # the pods talked over the switch
    assert_same_as_one_process(single, out, 2)


@pytest.mark.slow
def test_jobset_pods_run_model_fit_as_one_job(
    hosts: Hosts, fit: tuple[Path, Path, tuple[str, ...]], tmp_path: Path
) -> None:
    single, out, command = fit
    container = pod_container("--pods", "2", "--kind", "jobset", command=command)
    run_pods(
        container,
        {
            "node1": {"JOB_COMPLETION_INDEX": "0", "HOSTNAME": "train-worker-0-0"},
            "node2": {"JOB_COMPLETION_INDEX": "1", "HOSTNAME": "train-worker-0-1"},
        },
    )
    assert_same_as_one_process(single, out, 2)


@pytest.mark.slow
def test_tfjob_pods_run_model_fit_through_the_operators_tf_config(
    hosts: Hosts, fit: tuple[Path, Path, tuple[str, ...]], tmp_path: Path
) -> None:
    single, out, command = fit
    container = pod_container("--pods", "2", "--kind", "tfjob", command=command)
    port = container["ports"][0]["containerPort"]
    workers = [f"train-worker-{i}.default.svc:{port}" for i in range(2)]

    def tf_config(index: int) -> str:  # as Kubeflow's training operator writes it for worker `index`
        return json.dumps({"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}})

    run_pods(
        container,
        {
            "node1": {"TF_CONFIG": tf_config(0), "HOSTNAME": "train-worker-0"},
            "node2": {"TF_CONFIG": tf_config(1), "HOSTNAME": "train-worker-1"},
        },
    )
    assert_same_as_one_process(single, out, 2)


def test_pods_whose_command_is_tfdist_launch_run_two_workers_each(
    hosts: Hosts, fit: tuple[Path, Path, tuple[str, ...]], tmp_path: Path
) -> None:
    """``--nproc-per-pod 2``: each pod runs ``tfdist launch -n 2 train.py``; each launcher reads its node
    and peers from the pod (index, Service, pod count): 2 pods x 2 workers, one job."""
    single, out, command = fit
    container = pod_container("--pods", "2", "--name", "train", "--nproc-per-pod", "2", command=command)
    assert container["command"][:6] == ["python", "-m", "tfdist", "launch", "-n", "2"]
    outputs = run_pods(
        container,
        {
            "node1": {"JOB_COMPLETION_INDEX": "0", "HOSTNAME": "train-0"},
            "node2": {"JOB_COMPLETION_INDEX": "1", "HOSTNAME": "train-1"},
        },
    )
    summaries = [
        line for text in outputs for line in text.splitlines() if "formed at the kubernetes job" in line
    ]
    assert len(summaries) == 2 and summaries[0] == summaries[1]
    assert "node 1 train-1.train (train-1.train)" in summaries[0]
    assert_same_as_one_process(single, out, 4)
