"""Kubernetes: bad flags and bad pod variables are one line with exit code 2 and nothing written; without a
cluster, submit|status|logs|delete say so in one line; the status report."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import pytest

from helpers.cli import cli, tfdist
from tfdist.env import KubernetesEnvironment, LocalEnvironment, detect_environment
from tfdist.errors import ConfigError
from tfdist.k8s.status import describe, job_state

GOOD = ("--pods", "2", "--image", "img:1")


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        ((*GOOD, "--name", "Train_1"), "--name 'Train_1' is not a DNS-1123 label"),
        ((*GOOD, "--name", "a" * 64), "is not a DNS-1123 label"),
        ((*GOOD, "--name", "a" * 62), "Kubernetes allows 63"),
        (("--pods", "0", "--image", "img:1"), "--pods 0: a job needs at least 1 worker"),
        (("--pods", "two", "--image", "img:1"), "argument --pods: 'two' is not an integer"),
        ((*GOOD, "--gpus-per-pod", "1.5"), "argument --gpus-per-pod: '1.5' is not an integer"),
        ((*GOOD, "--gpus-per-pod", "-1"), "--gpus-per-pod -1 is negative"),
        ((*GOOD, "--pvc", "ckpt"), "--pvc 'ckpt' has no mount path"),
        ((*GOOD, "--pvc", "ckpt:"), "--pvc 'ckpt:' has no mount path"),
        ((*GOOD, "--pvc", "ckpt:data"), "must be an absolute path"),
        ((*GOOD, "--pvc", "Ckpt:/ckpt"), "is not a PersistentVolumeClaim name"),
        ((*GOOD, "--namespace", "ML"), "--namespace 'ML' is not a DNS-1123 label"),
        ((*GOOD, "--memory-per-pod", "16GB"), "--memory-per-pod '16GB' is not a positive Kubernetes"),
        ((*GOOD, "--cpus-per-pod", "0"), "--cpus-per-pod '0' is not a positive Kubernetes quantity"),
        ((*GOOD, "--port", "70000"), "--port 70000 is not a port"),
        ((*GOOD, "--max-restarts", "-1"), "--max-restarts -1 is negative"),
        ((*GOOD, "--env", "NOVALUE"), "--env 'NOVALUE' must be NAME=VALUE"),
        ((*GOOD, "--env", "TFDIST_WORLD_SIZE=8"), "set by the manifest itself"),
        ((*GOOD, "--kind", "statefulset"), "argument --kind: invalid choice: 'statefulset'"),
        (("--pods", "2", "--image", "my image"), "--image 'my image' is not an image reference"),
        (("--pods", "2"), "the following arguments are required: --image"),
        ((*GOOD, "--nproc-per-pod", "0"), "--nproc-per-pod 0: a pod needs at least 1 training process"),
        ((*GOOD, "--nproc-per-pod", "2", "--kind", "tfjob"), "gives each pod one TF_CONFIG, one process"),
        ((*GOOD, "--nproc-per-pod", "4", "--gpus-per-pod", "2"), "Hint: --gpus-per-pod 4 (or 0"),
        ((*GOOD, "--nproc-per-pod", "2", "--port", "65535"), "passes port 65535"),
    ],
)  # fmt: skip
def test_bad_manifest_flags_are_one_line_and_write_nothing(
    flags: tuple[str, ...], expected: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "train.yaml"
    code, stdout, stderr = cli(capsys, "k8s", "manifest", *flags, "-o", str(out), "--", "python", "train.py")
    assert code == 2 and stdout == "", stderr
    assert stderr.count("\n") == 1 and expected in stderr, stderr
    assert not list(tmp_path.iterdir())


def test_several_processes_per_pod_need_a_python_command_tfdist_launch_can_start(
    capsys: pytest.CaptureFixture[str],
) -> None:
    flags = (*GOOD, "--nproc-per-pod", "2")
    code, stdout, stderr = cli(capsys, "k8s", "manifest", *flags, "--", "python", "-u", "t.py")
    assert code == 2 and stdout == "" and stderr.count("\n") == 1
    assert "the command must be `python SCRIPT ...` or `python -m MODULE ...`" in stderr


def test_no_command_and_a_missing_output_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, stderr = cli(capsys, "k8s", "manifest", *GOOD)
    assert code == 2 and "no command to run" in stderr and stderr.count("\n") == 1
    missing = tmp_path / "nowhere" / "train.yaml"
    code, _, stderr = cli(capsys, "k8s", "manifest", *GOOD, "-o", str(missing), "--", "python", "t.py")
    assert code == 2 and "does not exist" in stderr and not missing.parent.exists()


def _no_cluster_env(tmp_path: Path, kubeconfig: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KUBERNETES_", "KUBECONFIG"))}
    env["HOME"] = str(tmp_path)  # no ~/.kube/config
    if kubeconfig is not None:
        env["KUBECONFIG"] = kubeconfig
    return env


@pytest.mark.parametrize(
    "argv",
    [
        ("submit", *GOOD, "--", "python", "train.py"),
        ("status", "train"),
        ("logs", "train", "--kind", "jobset"),
        ("delete", "train", "--kind", "tfjob"),
    ],
)
def test_without_a_cluster_every_cluster_command_is_one_line(argv: tuple[str, ...], tmp_path: Path) -> None:
    proc = tfdist("k8s", *argv, base_env=_no_cluster_env(tmp_path, None), cwd=tmp_path, timeout=60)
    code, stdout, stderr = proc.returncode, proc.stdout, proc.stderr
    assert code == 2 and stdout == "" and stderr.count("\n") == 1, stderr
    assert "no Kubernetes cluster is reachable: not inside a pod, and no usable kubeconfig" in stderr
    assert not list(p for p in tmp_path.iterdir() if p.name != ".kube")


def test_a_cluster_that_does_not_answer_is_one_line_and_quick(tmp_path: Path) -> None:
    with socket.socket() as probe:  # a loopback port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        f"clusters: [{{name: k, cluster: {{server: 'https://127.0.0.1:{port}'}}}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: k, user: u, namespace: ml}}]\n"
    )
    started = time.monotonic()
    proc = tfdist("k8s", "status", "train", base_env=_no_cluster_env(tmp_path, str(kubeconfig)), timeout=60)
    code, stderr = proc.returncode, proc.stderr
    assert code == 2 and stderr.count("\n") == 1, stderr
    assert (
        f"reading Job 'train' in namespace 'ml': the Kubernetes API server https://127.0.0.1:{port}" in stderr
    )
    assert "did not answer" in stderr and time.monotonic() - started < 30


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({"TFDIST_WORLD_SIZE": None}, "TFDIST_WORLD_SIZE (the pod count) is not"),
        ({"TFDIST_WORLD_SIZE": "two"}, "TFDIST_WORLD_SIZE='two' is not an integer"),
        ({"TFDIST_WORLD_SIZE": "1"}, "JOB_COMPLETION_INDEX=1 but TFDIST_WORLD_SIZE=1"),
        ({"JOB_COMPLETION_INDEX": "x"}, "JOB_COMPLETION_INDEX='x' is not an integer"),
        ({"HOSTNAME": "train-0"}, "HOSTNAME='train-0' does not end with -1"),
        ({"HOSTNAME": "-1"}, "does not end with -1"),
        ({"HOSTNAME": None}, "HOSTNAME is not set"),
        ({"TFDIST_K8S_SERVICE": "Train"}, "TFDIST_K8S_SERVICE='Train' is not a Service name"),
        ({"TFDIST_PORT": "0"}, "TFDIST_PORT=0 is not a port"),
    ],
)  # fmt: skip
def test_bad_pod_variables_say_which(environ: dict[str, str | None], expected: str) -> None:
    """A pod of a 2-pod job, with one variable changed (None: removed)."""
    base = {"JOB_COMPLETION_INDEX": "1", "TFDIST_K8S_SERVICE": "train", "TFDIST_WORLD_SIZE": "2",
            "HOSTNAME": "train-1", **environ}  # fmt: skip
    pod = {key: value for key, value in base.items() if value is not None}
    with pytest.raises(ConfigError) as info:
        detect_environment(pod)
    assert expected in str(info.value)


@pytest.mark.parametrize(
    ("environ", "kind"),
    [
        ({"JOB_COMPLETION_INDEX": "3", "HOSTNAME": "batch-3"}, LocalEnvironment),  # an Indexed Job not ours
        ({"TFDIST_K8S_SERVICE": "train", "HOSTNAME": "train-0"}, LocalEnvironment),  # not in a Job
        ({"JOB_COMPLETION_INDEX": "0", "TFDIST_K8S_SERVICE": "t", "TFDIST_WORLD_SIZE": "1",
          "HOSTNAME": "t-0"}, KubernetesEnvironment),
    ],
)  # fmt: skip
def test_detection(environ: dict[str, str], kind: type) -> None:
    assert type(detect_environment(environ)) is kind


def test_port_and_gpus_come_from_the_pod() -> None:
    found = detect_environment(
        {"JOB_COMPLETION_INDEX": "2", "TFDIST_K8S_SERVICE": "svc", "TFDIST_WORLD_SIZE": "3",
         "TFDIST_PORT": "3000", "HOSTNAME": "my-job-2", "CUDA_VISIBLE_DEVICES": "0,1"}
    )  # fmt: skip
    assert found.cluster_spec == {"worker": [f"my-job-{i}.svc:3000" for i in range(3)]}
    assert found.gpu_ids == ("0", "1") and found.gpus_bound_by_scheduler and found.local_world_size == 1


@pytest.mark.parametrize(
    ("kind", "status", "state"),
    [
        ("Job", {}, "Pending"),
        ("Job", {"active": 2}, "Running"),
        ("Job", {"conditions": [{"type": "Complete", "status": "True"}], "succeeded": 2}, "Complete"),
        ("Job", {"conditions": [{"type": "Failed", "status": "True"}], "failed": 1}, "Failed"),
        ("JobSet", {"replicatedJobsStatus": [{"name": "worker", "active": 1}]}, "Running"),
        ("JobSet", {"conditions": [{"type": "Completed", "status": "True"}]}, "Completed"),
        ("TFJob", {"conditions": [{"type": "Created", "status": "True"},
                                  {"type": "Running", "status": "True"}]}, "Running"),
        ("TFJob", {"conditions": [{"type": "Running", "status": "False"},
                                  {"type": "Succeeded", "status": "True"}]}, "Succeeded"),
    ],
)  # fmt: skip
def test_job_state(kind: str, status: dict[str, object], state: str) -> None:
    assert job_state(kind, status) == state


def test_status_report() -> None:
    pods = [
        {"metadata": {"name": "train-0-abcde"},
         "status": {"phase": "Running", "containerStatuses": [{"restartCount": 1}]}},
        {"metadata": {"name": "train-1-fghij"}, "status": {"phase": "Pending"}},
    ]  # fmt: skip
    text = describe("Job", "train", "ml", {"active": 1, "failed": 1}, pods)
    assert text == (
        "Job train in namespace ml: Running (active 1, succeeded 0, failed 1)\n"
        "  pod train-0-abcde: Running, restarts 1\n"
        "  pod train-1-fghij: Pending, restarts 0\n"
    )
    assert describe("JobSet", "t", "default", {}, []).endswith("  no pods (yet)\n")
