"""K8sJobSpec -> the Kubernetes objects of one training job, and their YAML (pure). Every pod runs ``tfdist
run -- COMMAND`` (or ``tfdist launch -n K``) and finds its place as an ``srun`` task does: an Indexed Job
with a headless Service (``job``), a JobSet (restarts the whole set), or Kubeflow's TFJob (its TF_CONFIG).
"""

from __future__ import annotations

from typing import Any

from tfdist.env.kubernetes import INDEX_VARIABLE
from tfdist.errors import require
from tfdist.k8s.spec import JOBSET_REPLICATED_JOB, K8sJobSpec

Manifest = dict[str, Any]
#: TFJob's operator reads the port of this container and port name (its defaults).
TFJOB_CONTAINER, TFJOB_PORT_NAME = "tensorflow", "tfjob-port"
GPU_RESOURCE = "nvidia.com/gpu"


class _Command(list[str]):
    """A command line: written on one line in the YAML (``[python, -m, tfdist, run, --, ...]``)."""


def labels(spec: K8sJobSpec) -> dict[str, str]:
    """The labels every object and pod of the job carries (the Service selects its pods by them)."""
    return {"app.kubernetes.io/name": "tfdist", "app.kubernetes.io/instance": spec.name}


def _metadata(spec: K8sJobSpec) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": spec.name}
    if spec.namespace is not None:
        meta["namespace"] = spec.namespace
    meta["labels"] = labels(spec)
    return meta


def container(spec: K8sJobSpec, name: str = "worker", port_name: str = "tf") -> dict[str, Any]:
    """The one container of every pod, with the job's variables."""
    env: list[dict[str, str]] = []
    if spec.kind != "tfjob":  # the training operator describes a TFJob's cluster in TF_CONFIG itself
        env += [
            {"name": "TFDIST_WORLD_SIZE", "value": str(spec.workers)},
            {"name": "TFDIST_K8S_SERVICE", "value": spec.service},
            {"name": "TFDIST_PORT", "value": str(spec.port)},
        ]
    # Python's output reaches `kubectl logs` line by line rather than in 8 KiB blocks.
    env.append({"name": "PYTHONUNBUFFERED", "value": "1"})
    env += [{"name": key, "value": value} for key, value in spec.env]
    out: dict[str, Any] = {
        "name": name,
        "image": spec.image,
        "command": _Command(list(spec.pod_command())),
        "env": env,
        # Every process of the pod listens on its own port: port, port + 1, ...
        "ports": [
            {"name": port_name if i == 0 else f"{port_name}-{i}", "containerPort": spec.port + i}
            for i in range(spec.nproc_per_pod)
        ],
    }
    resources = _resources(spec)
    if resources:
        out["resources"] = resources
    mounts = [{"name": f"pvc-{i}", "mountPath": path} for i, (_, path) in enumerate(spec.pvcs)]
    if spec.gpus_per_worker > 1:
        mounts.append({"name": "dshm", "mountPath": "/dev/shm"})
    if mounts:
        out["volumeMounts"] = mounts
    return out


def _resources(spec: K8sJobSpec) -> dict[str, Any]:
    requests = {key: value for key, value in (("cpu", spec.cpu), ("memory", spec.memory)) if value}
    resources: dict[str, Any] = {}
    if requests:
        resources["requests"] = requests
    if spec.gpus_per_worker:
        # Extended resources are asked for in limits (requests default to them); GPUs are never shared.
        resources["limits"] = {GPU_RESOURCE: spec.gpus_per_worker}
    return resources


def _volumes(spec: K8sJobSpec) -> list[dict[str, Any]]:
    volumes: list[dict[str, Any]] = [
        {"name": f"pvc-{i}", "persistentVolumeClaim": {"claimName": claim}}
        for i, (claim, _) in enumerate(spec.pvcs)
    ]
    if spec.gpus_per_worker > 1:
        # NCCL between the GPUs of one pod goes through /dev/shm, which is 64 MiB in a pod by default.
        volumes.append({"name": "dshm", "emptyDir": {"medium": "Memory"}})
    return volumes


def _pod_spec(spec: K8sJobSpec, restart_policy: str, **extra: Any) -> dict[str, Any]:
    one = container(spec, TFJOB_CONTAINER, TFJOB_PORT_NAME) if spec.kind == "tfjob" else container(spec)
    pod: dict[str, Any] = {**extra, "restartPolicy": restart_policy, "containers": [one]}
    volumes = _volumes(spec)
    if volumes:
        pod["volumes"] = volumes
    return pod


def _indexed_job_spec(spec: K8sJobSpec, backoff_limit: int, pod: dict[str, Any]) -> dict[str, Any]:
    return {
        "completionMode": "Indexed",
        "completions": spec.workers,
        "parallelism": spec.workers,
        "backoffLimit": backoff_limit,
        "template": {"metadata": {"labels": labels(spec)}, "spec": pod},
    }


def headless_service(spec: K8sJobSpec) -> Manifest:
    """The Service without a cluster IP that gives pod ``i`` the DNS name ``<name>-i.<name>``."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(spec),
        "spec": {
            "clusterIP": "None",
            # Names resolve as soon as a pod has an address, not only once it is ready: the pods look each
            # other up while they start.
            "publishNotReadyAddresses": True,
            "selector": labels(spec),
            "ports": [{"name": "tf", "port": spec.port, "targetPort": spec.port}],
        },
    }


def indexed_job(spec: K8sJobSpec) -> Manifest:
    """The Indexed Job: N pods at once, pod ``i`` with ``JOB_COMPLETION_INDEX=i``, hostname ``<name>-i``."""
    pod = _pod_spec(spec, "OnFailure", subdomain=spec.service)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": _metadata(spec),
        "spec": _indexed_job_spec(spec, spec.max_restarts * spec.workers, pod),
    }


def jobset(spec: K8sJobSpec) -> Manifest:
    """One replicated Indexed Job in a JobSet; the JobSet makes the headless Service named after itself."""
    # restartPolicy Never and backoffLimit 0: any failed pod fails its Job, and the JobSet then restarts
    # every pod together (failurePolicy), which is what a job bound by collectives needs.
    pod = _pod_spec(spec, "Never")
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": _metadata(spec),
        "spec": {
            "failurePolicy": {"maxRestarts": spec.max_restarts},
            "network": {
                "enableDNSHostnames": True,
                "subdomain": spec.service,
                "publishNotReadyAddresses": True,
            },
            "replicatedJobs": [
                {
                    "name": JOBSET_REPLICATED_JOB,
                    "replicas": 1,
                    "template": {"spec": _indexed_job_spec(spec, 0, pod)},
                }
            ],
        },
    }


def tfjob(spec: K8sJobSpec) -> Manifest:
    """Kubeflow's v1 TFJob of N workers (worker 0 is the chief); the operator makes Services, TF_CONFIG."""
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": _metadata(spec),
        "spec": {
            # Pods stay after the job ends so that their logs can be read.
            "runPolicy": {"backoffLimit": spec.max_restarts * spec.workers, "cleanPodPolicy": "None"},
            "tfReplicaSpecs": {
                "Worker": {
                    "replicas": spec.workers,
                    "restartPolicy": "OnFailure",
                    "template": {
                        "metadata": {"labels": labels(spec)},
                        "spec": _pod_spec(spec, "OnFailure"),
                    },
                }
            },
        },
    }


def render_manifests(spec: K8sJobSpec) -> list[Manifest]:
    """The objects to create, in the order to create them (a Service before the pods that use it)."""
    if spec.kind == "jobset":
        return [jobset(spec)]
    if spec.kind == "tfjob":
        return [tfjob(spec)]
    return [headless_service(spec), indexed_job(spec)]


def render_yaml(spec: K8sJobSpec) -> str:
    """The manifests as one multi-document YAML file, with a header saying what it is and how to apply it."""
    what = {
        "job": "an Indexed Job and its headless Service",
        "jobset": "a JobSet (needs the JobSet controller)",
        "tfjob": "a TFJob (needs Kubeflow's training operator v1)",
    }[spec.kind]
    reads = (
        "the TF_CONFIG the operator writes"
        if spec.kind == "tfjob"
        else f"{INDEX_VARIABLE}, HOSTNAME and the TFDIST_* variables below"
    )
    header = (
        f"# tfdist k8s manifest: job {spec.name!r}, {spec.workers} worker pod(s), {what}.\n"
        f"# Every pod runs `tfdist run -- ...`, which reads {reads}.\n"
        "# Apply with: kubectl apply -f THIS_FILE (or tfdist k8s submit with the same options).\n"
    )
    yaml: Any = require("yaml", "PyYAML", "k8s", "tfdist k8s manifest")

    class Dumper(yaml.SafeDumper):
        """PyYAML's safe dumper, with commands on one line."""

    Dumper.add_representer(
        _Command,
        lambda dumper, data: dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=True),
    )
    body = yaml.dump_all(
        render_manifests(spec), Dumper=Dumper, sort_keys=False, default_flow_style=False, width=1000
    )
    return header + body
