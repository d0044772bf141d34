"""Kubernetes manifests: golden files, Kubernetes' published schemas (offline), the CRDs of JobSet and TFJob,
what the API server checks beyond the schema, and the pods' view of the job they form."""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from referencing import Registry, Resource

from tfdist.cli import main
from tfdist.env import KubernetesEnvironment, TFConfigEnvironment, detect_environment
from tfdist.k8s import K8sJobSpec, render_yaml

GOLDEN = Path(__file__).parent.parent / "golden"
SCHEMAS = Path(__file__).parent.parent / "k8s-schemas"
#: The Kubernetes version whose published schema the objects must pass (kubernetes-validate's newest).
K8S_VERSION = "1.37"
BUILTIN_SCHEMAS = (
    Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema" / f"v{K8S_VERSION}.0-local-strict"
)
IMAGE = "registry.example.com/ml/tfdist:2.21"
COMMAND = ("python", "train.py", "--epochs", "30", "--checkpoint-dir", "/ckpt/run 1")
FULL = (
    "--gpus-per-pod", "4", "--cpus-per-pod", "16", "--memory-per-pod", "64Gi", "--pvc", "ckpt:/ckpt",
    "--pvc", "imagenet.data:/data", "--env", "TF_ENABLE_ONEDNN_OPTS=0", "--namespace", "ml",
)  # fmt: skip
#: golden name -> flags of `tfdist k8s manifest` (before `-- COMMAND`).
VARIANTS: dict[str, tuple[str, ...]] = {
    "job": ("--pods", "2", "--image", IMAGE),
    "job-gpu": ("--pods", "4", "--image", IMAGE, "--name", "resnet", *FULL),
    "jobset": ("--pods", "4", "--image", IMAGE, "--kind", "jobset", *FULL),
    "tfjob": ("--pods", "4", "--image", IMAGE, "--kind", "tfjob", *FULL),
    "job-procs": ("--pods", "2", "--image", IMAGE, "--nproc-per-pod", "4", "--gpus-per-pod", "4"),
}
SPECS = {
    "job-1": K8sJobSpec(command=COMMAND, image=IMAGE, workers=1),
    "job-cpu": K8sJobSpec(command=COMMAND, image=IMAGE, workers=3, cpu="500m", memory="2Gi", port=3000),
    "job-gpu": K8sJobSpec(
        command=COMMAND, image=IMAGE, workers=4, gpus_per_worker=8, pvcs=(("ckpt", "/ckpt"),), namespace="ml"
    ),
    "jobset": K8sJobSpec(command=COMMAND, image=IMAGE, workers=3, kind="jobset", max_restarts=0),
    "jobset-gpu": K8sJobSpec(
        command=COMMAND, image=IMAGE, workers=2, kind="jobset", gpus_per_worker=2, pvcs=(("d", "/d"),)
    ),
    "tfjob": K8sJobSpec(command=COMMAND, image=IMAGE, workers=2, kind="tfjob"),
    "job-procs": K8sJobSpec(command=COMMAND, image=IMAGE, workers=3, nproc_per_pod=2),
    "jobset-procs": K8sJobSpec(
        command=("python", "-m", "pkg.train"),
        image=IMAGE,
        workers=2,
        kind="jobset",
        nproc_per_pod=8,
        gpus_per_worker=8,
    ),
    "job-procs-binary": K8sJobSpec(command=("/opt/train",), image=IMAGE, workers=2, nproc_per_pod=2),
    "tfjob-gpu": K8sJobSpec(
        command=COMMAND, image=IMAGE, workers=5, kind="tfjob", gpus_per_worker=1, cpu="4", memory="8G"
    ),
}


def manifest_text(capsys: pytest.CaptureFixture[str], *flags: str) -> str:
    assert main(["k8s", "manifest", *flags, "--", *COMMAND]) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_golden_manifests(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    text = manifest_text(capsys, *VARIANTS[name])
    path = GOLDEN / f"k8s-{name}.yaml"
    if os.environ.get("UPDATE_GOLDEN") == "1":  # regenerate with UPDATE_GOLDEN=1
        path.write_text(text)
    assert text == path.read_text()


def plain(spec: K8sJobSpec) -> list[dict[str, Any]]:
    """The objects as a YAML reader gets them back from the rendered file."""
    return list(yaml.safe_load_all(render_yaml(spec)))


# --- Kubernetes' own schema for the built-in kinds (Job, Service) ------------------------------------------


def builtin(spec_name: str) -> list[dict[str, Any]]:
    return [doc for doc in plain(SPECS[spec_name]) if doc["kind"] in ("Job", "Service")]


@pytest.mark.parametrize("name", [n for n in sorted(SPECS) if n.startswith("job-")])
def test_job_and_service_pass_the_published_schema_strictly(name: str) -> None:
    docs = builtin(name)
    assert [d["kind"] for d in docs] == ["Service", "Job"]
    for doc in docs:
        # strict: an unknown or misspelt field fails, as `kubectl apply --validate=strict` would.
        assert kubernetes_validate.validate(doc, K8S_VERSION, strict=True) == K8S_VERSION


@pytest.mark.parametrize(
    ("path", "value", "expected"),
    [
        (("spec", "paralelism"), 2, "'paralelism' was unexpected"),
        (("spec", "completions"), "2", "is not of type 'integer'"),
        (("spec", "template", "spec", "containers"), "worker", "is not of type 'array'"),
    ],
)
def test_the_published_schema_catches_a_broken_job(
    path: tuple[str, ...], value: object, expected: str
) -> None:
    job = copy.deepcopy(builtin("job-cpu")[1])
    node = job
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    with pytest.raises(kubernetes_validate.ValidationError) as info:
        kubernetes_validate.validate(job, K8S_VERSION, strict=True)
    assert expected in info.value.message


# --- the CRDs' OpenAPI schemas for JobSet and TFJob (vendored, see tests/k8s-schemas/README.md) ------------


def strict(schema: Any) -> Any:
    """The schema with unknown fields refused wherever the CRD lists its fields (the API server's strict
    field validation); fields kept open on purpose (x-kubernetes-preserve-unknown-fields) stay open."""
    if isinstance(schema, list):
        return [strict(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: strict(value) for key, value in schema.items()}
    if (
        "properties" in out
        and "additionalProperties" not in out
        and not out.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


def crd_validator(kind: str) -> jsonschema.protocols.Validator:
    crd = {"JobSet": "jobset.x-k8s.io_jobsets.json", "TFJob": "kubeflow.org_tfjobs.json"}[kind]
    doc = json.loads((SCHEMAS / crd).read_text())
    [(version, schema)] = doc["versions"].items()
    schema = strict(schema)
    # The API server checks these itself, outside the CRD's schema.
    schema["properties"]["apiVersion"] = {"const": f"{doc['group']}/{version}"}
    schema["properties"]["kind"] = {"const": doc["kind"]}
    # metadata is not in a CRD's schema: the API server checks it as ObjectMeta, from the published schema.
    definitions = json.loads((BUILTIN_SCHEMAS / "_definitions.json").read_text())
    schema["properties"]["metadata"] = {
        "$ref": f"{definitions['$id']}#/$defs/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
    }
    registry: Registry = Resource.from_contents(definitions) @ Registry()
    return jsonschema.Draft202012Validator(schema, registry=registry)


@pytest.mark.parametrize("name", [n for n in sorted(SPECS) if not n.startswith("job-")])
def test_jobset_and_tfjob_pass_their_crd_schemas(name: str) -> None:
    [doc] = plain(SPECS[name])
    errors = [e.message for e in crd_validator(doc["kind"]).iter_errors(doc)]
    assert not errors, errors


@pytest.mark.parametrize(
    ("name", "path", "value", "expected"),
    [
        ("jobset", ("spec", "failurePolicy", "maxRestart"), 3, "'maxRestart' was unexpected"),
        ("jobset", ("spec", "replicatedJobs"), {"name": "w"}, "is not of type 'array'"),
        ("tfjob", ("spec", "tfReplicaSpecs", "Worker", "replicas"), "4", "is not of type 'integer'"),
        ("tfjob", ("spec", "runPolicy", "cleanPodPolicies"), "None", "'cleanPodPolicies' was unexpected"),
        ("tfjob", ("kind", ), "TFJobs", "'TFJob' was expected"),
        ("tfjob", ("metadata", "nam"), "x", "'nam' was unexpected"),
        ("jobset", ("spec", "replicatedJobs", 0, "template", "spec", "template", "spec", "containers", 0,
                    "imagePullPolicyy"), "Always", "'imagePullPolicyy' was unexpected"),
    ],
)  # fmt: skip
def test_the_crd_schemas_catch_a_broken_object(
    name: str, path: tuple[str | int, ...], value: object, expected: str
) -> None:
    [doc] = plain(SPECS[name])
    kind = doc["kind"]
    node: Any = doc
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    errors = [e.message for e in crd_validator(kind).iter_errors(doc)]
    assert any(expected in message for message in errors), errors


# --- what the API server checks beyond the schema, and what the pods rely on ----------------------------


def pod_template(doc: dict[str, Any]) -> dict[str, Any]:
    if doc["kind"] == "Job":
        return dict(doc["spec"]["template"])
    if doc["kind"] == "JobSet":
        return dict(doc["spec"]["replicatedJobs"][0]["template"]["spec"]["template"])
    return dict(doc["spec"]["tfReplicaSpecs"]["Worker"]["template"])


@pytest.mark.parametrize("name", sorted(SPECS))
def test_rules_the_api_server_enforces(name: str) -> None:
    spec = SPECS[name]
    docs = plain(spec)
    workload = docs[-1]
    template = pod_template(workload)
    # Pods of a Job may not restart Always; every label value and volume name is a DNS-1123 label.
    assert template["spec"]["restartPolicy"] in ("OnFailure", "Never")
    [container] = template["spec"]["containers"]
    names = {m["name"] for m in container.get("volumeMounts", [])}
    assert names == {v["name"] for v in template["spec"].get("volumes", [])}
    assert all(len(n) <= 63 for n in names)
    # Extended resources (GPUs) are whole numbers in limits.
    gpus = container.get("resources", {}).get("limits", {}).get("nvidia.com/gpu")
    assert gpus == (spec.gpus_per_worker or None)
    if spec.nproc_per_pod == 1:
        assert container["command"][:5] == ["python", "-m", "tfdist", "run", "--"]
        assert tuple(container["command"][5:]) == COMMAND
    else:
        assert container["command"][:6] == ["python", "-m", "tfdist", "launch", "-n", str(spec.nproc_per_pod)]
        assert ("--cpu" in container["command"]) == (not spec.gpus_per_worker)
    # One port per process, each named once (a name is at most 15 characters).
    ports = container["ports"]
    assert [p["containerPort"] for p in ports] == list(range(spec.port, spec.port + spec.nproc_per_pod))
    assert len({p["name"] for p in ports}) == len(ports) and all(len(p["name"]) <= 15 for p in ports)
    if workload["kind"] == "Job":
        service = docs[0]
        assert workload["spec"]["parallelism"] == workload["spec"]["completions"] == spec.workers
        assert workload["spec"]["completionMode"] == "Indexed"
        # The Service selects exactly these pods, and the pods are in its DNS subdomain.
        assert service["spec"]["clusterIP"] == "None"
        assert service["spec"]["selector"].items() <= template["metadata"]["labels"].items()
        assert template["spec"]["subdomain"] == service["metadata"]["name"]
        assert workload["spec"]["backoffLimit"] == spec.max_restarts * spec.workers
    if workload["kind"] == "TFJob":
        assert container["name"] == "tensorflow"
        assert container["ports"] == [{"name": "tfjob-port", "containerPort": spec.port}]


@pytest.mark.parametrize("name", ["job-1", "job-cpu", "job-gpu", "jobset", "jobset-gpu"])
def test_every_pod_derives_the_same_job_from_what_kubernetes_gives_it(name: str) -> None:
    """Pod i gets the manifest's variables plus what the Job controller and the runtime add."""
    spec = SPECS[name]
    [container] = pod_template(plain(spec)[-1])["spec"]["containers"]
    manifest_env = {item["name"]: item["value"] for item in container["env"]}
    expected = [f"{spec.pod_hostname(i)}.{spec.service}:{spec.port}" for i in range(spec.workers)]
    for index in range(spec.workers):
        pod_env = {**manifest_env, "JOB_COMPLETION_INDEX": str(index), "HOSTNAME": spec.pod_hostname(index)}
        found = detect_environment(pod_env)
        assert isinstance(found, KubernetesEnvironment)
        assert (found.rank, found.world_size, found.is_chief) == (index, spec.workers, index == 0)
        assert found.cluster_spec == {"worker": expected}


@pytest.mark.parametrize("name", ["job-procs", "jobset-procs"])
def test_each_pods_launcher_derives_the_same_nodes(name: str) -> None:
    """With several processes per pod, each pod's `tfdist launch` reads the pods as the job's nodes."""
    from tfdist.launcher.membership import from_scheduler, scheduler_environment

    spec = SPECS[name]
    [container] = pod_template(plain(spec)[-1])["spec"]["containers"]
    manifest_env = {item["name"]: item["value"] for item in container["env"]}
    k = spec.nproc_per_pod
    for index in range(spec.workers):
        pod_env = {**manifest_env, "JOB_COMPLETION_INDEX": str(index), "HOSTNAME": spec.pod_hostname(index)}
        env = scheduler_environment(pod_env)
        assert env is not None
        answer = from_scheduler(env, pod_env, k, k).meet()
        assert answer.node_rank == index
        assert answer.names == tuple(f"{spec.pod_hostname(i)}.{spec.service}" for i in range(spec.workers))
        assert answer.ports == (tuple(range(spec.port, spec.port + k)),) * spec.workers
    command = container["command"]
    if name == "jobset-procs":  # `python -m pkg.train` stays a module for the launcher
        assert command[-2:] == ["-m", "pkg.train"] and "--cpu" not in command


def test_a_command_that_is_not_python_runs_as_is_in_each_process() -> None:
    [container] = pod_template(plain(SPECS["job-procs-binary"])[-1])["spec"]["containers"]
    assert container["command"][-2:] == ["--no-python", "/opt/train"]


def test_a_tfjob_pod_keeps_the_operators_tf_config() -> None:
    spec = SPECS["tfjob"]
    [container] = pod_template(plain(spec)[-1])["spec"]["containers"]
    assert not any(item["name"].startswith("TFDIST_") for item in container["env"])
    # What Kubeflow's training operator writes into worker 1 of TFJob "train" in namespace "default".
    workers = [f"train-worker-{i}.default.svc:2222" for i in range(2)]
    tf_config = json.dumps({"cluster": {"worker": workers}, "task": {"type": "worker", "index": 1}})
    found = detect_environment({"TF_CONFIG": tf_config, "HOSTNAME": "train-worker-1"})
    assert isinstance(found, TFConfigEnvironment) and (found.rank, found.world_size) == (1, 2)


def test_output_file_is_the_printed_manifest(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    printed = manifest_text(capsys, *VARIANTS["job"])
    out = tmp_path / "train.yaml"
    assert main(["k8s", "manifest", *VARIANTS["job"], "-o", str(out), "--", *COMMAND]) == 0
    assert out.read_text() == printed
    assert f"kubectl apply -f {out}" in capsys.readouterr().out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train.yaml"]  # no temporary file left
