"""Submit, watch and remove a job through the official ``kubernetes`` client (``tfdist[k8s]``, imported
lazily), on the cluster kubectl finds; every request has a time limit: a silent cluster is one line."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, cast

from tfdist.errors import ConfigError, SetupError
from tfdist.k8s.manifest import Manifest

#: (connect, read) seconds for every request to the API server.
_TIMEOUT: dict[str, Any] = {"_request_timeout": (5.0, 30.0)}
#: group, version, plural of the custom resources tfdist writes.
CUSTOM = {"JobSet": ("jobset.x-k8s.io", "v1alpha2", "jobsets"), "TFJob": ("kubeflow.org", "v1", "tfjobs")}
KIND_OF = {"job": "Job", "jobset": "JobSet", "tfjob": "TFJob"}
CONTROLLER = {"JobSet": "the JobSet controller", "TFJob": "Kubeflow's training operator (v1)"}
_SA_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


@dataclass(frozen=True)
class Cluster:
    """A connected API client, where it came from, and the namespace to use when none is given."""

    api: Any
    source: str
    namespace: str

    @property
    def server(self) -> str:
        """The API server's address."""
        return str(self.api.configuration.host)


def connect() -> Cluster:
    """The cluster kubectl would talk to; SetupError (one line) when there is none or no client."""
    try:
        from kubernetes import client, config
        from kubernetes.config.config_exception import ConfigException
    except ImportError:
        raise SetupError(
            "the kubernetes Python client is not installed. Hint: pip install 'tfdist[k8s]'."
        ) from None
    configuration = client.Configuration()
    try:
        config.load_incluster_config(client_configuration=configuration)
        source, namespace = "in-cluster service account", _read_sa_namespace()
    except ConfigException:
        where = os.environ.get("KUBECONFIG") or "~/.kube/config"
        try:
            config.load_kube_config(config_file=where, client_configuration=configuration)
            _, current = config.list_kube_config_contexts(config_file=where)
        except (ConfigException, OSError, ValueError, TypeError) as exc:
            raise SetupError(
                f"no Kubernetes cluster is reachable: not inside a pod, and no usable kubeconfig at {where} "
                f"({_first_line(exc)}). Hint: set KUBECONFIG to your cluster's config (the file kubectl "
                "uses), or write the manifest with tfdist k8s manifest and apply it where kubectl works."
            ) from None
        source = f"kubeconfig {where}"
        namespace = (current or {}).get("context", {}).get("namespace") or "default"
    # One try per request: a cluster that does not answer is reported at once, not after urllib3's retries.
    configuration.retries = 0
    return Cluster(client.ApiClient(configuration), source, namespace)


def _read_sa_namespace() -> str:
    try:
        with open(_SA_NAMESPACE, encoding="utf-8") as fh:
            return fh.read().strip() or "default"
    except OSError:
        return "default"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0].rstrip(".") if text else type(exc).__name__


def call(cluster: Cluster, what: str, request: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``request(*args, **kwargs)`` within the time limit; the API server's refusals and silences become
    one-line errors naming ``what``."""
    import urllib3
    from kubernetes.client.exceptions import ApiException

    try:
        return request(*args, **kwargs, **_TIMEOUT)
    except ApiException as exc:
        reason = _api_message(exc)
        if exc.status == 404:
            raise ConfigError(f"{what}: not found on {cluster.server} ({reason}).") from None
        if exc.status == 409:
            raise ConfigError(
                f"{what}: it already exists ({reason}). Hint: tfdist k8s delete it first, or choose another "
                "--name."
            ) from None
        if exc.status in (401, 403):
            raise SetupError(
                f"{what}: the API server {cluster.server} refused ({exc.status} {reason}). Hint: check the "
                f"credentials of {cluster.source} (kubectl auth can-i)."
            ) from None
        raise ConfigError(f"{what}: the API server answered {exc.status}: {reason}.") from None
    except (urllib3.exceptions.HTTPError, OSError) as exc:
        raise SetupError(
            f"{what}: the Kubernetes API server {cluster.server} (from {cluster.source}) did not answer "
            f"({_first_line(exc)}). Hint: is the cluster up? kubectl cluster-info shows what kubectl reaches."
        ) from None


def _api_message(exc: Any) -> str:
    import json

    try:
        body = json.loads(exc.body or "{}")
    except (TypeError, ValueError):
        body = {}
    message = body.get("message") if isinstance(body, dict) else None
    return " ".join(str(message or exc.reason or "no reason given").split())


def _custom(kind: str, namespace: str) -> tuple[str, str, str, str]:
    """The leading arguments of the custom objects API's calls for ``kind``."""
    group, version, plural = CUSTOM[kind]
    return group, version, namespace, plural


def create(cluster: Cluster, manifest: Manifest, namespace: str) -> None:
    """Create one object of a rendered manifest in ``namespace``."""
    from kubernetes import client

    kind, name = manifest["kind"], manifest["metadata"]["name"]
    what = f"creating {kind} {name!r} in namespace {namespace!r}"
    body = cast(Any, manifest)  # the client sends plain dicts as they are; its hints name only its models
    if kind == "Service":
        call(cluster, what, client.CoreV1Api(cluster.api).create_namespaced_service, namespace, body)
    elif kind == "Job":
        call(cluster, what, client.BatchV1Api(cluster.api).create_namespaced_job, namespace, body)
    else:
        custom = client.CustomObjectsApi(cluster.api).create_namespaced_custom_object
        call(cluster, f"{what} (needs {CONTROLLER[kind]} installed)", custom, *_custom(kind, namespace), body)


def delete(cluster: Cluster, kind: str, name: str, namespace: str) -> None:
    """Delete one object and, in the background, what it owns (the pods)."""
    from kubernetes import client

    what = f"deleting {kind} {name!r} in namespace {namespace!r}"
    if kind == "Service":
        call(cluster, what, client.CoreV1Api(cluster.api).delete_namespaced_service, name, namespace)
    elif kind == "Job":
        batch = client.BatchV1Api(cluster.api)
        call(cluster, what, batch.delete_namespaced_job, name, namespace, propagation_policy="Background")
    else:
        custom = client.CustomObjectsApi(cluster.api).delete_namespaced_custom_object
        call(cluster, what, custom, *_custom(kind, namespace), name, propagation_policy="Background")


def read_status(cluster: Cluster, kind: str, name: str, namespace: str) -> dict[str, Any]:
    """The object's ``status`` as a plain dict."""
    from kubernetes import client

    what = f"reading {kind} {name!r} in namespace {namespace!r}"
    if kind == "Job":
        job = call(cluster, what, client.BatchV1Api(cluster.api).read_namespaced_job_status, name, namespace)
        return dict(cluster.api.sanitize_for_serialization(job).get("status") or {})
    custom = client.CustomObjectsApi(cluster.api).get_namespaced_custom_object
    return dict(call(cluster, what, custom, *_custom(kind, namespace), name).get("status") or {})


def pods(cluster: Cluster, name: str, namespace: str) -> list[dict[str, Any]]:
    """The job's pods (by the labels every manifest gives them), in name order, as plain dicts."""
    from kubernetes import client

    selector = f"app.kubernetes.io/name=tfdist,app.kubernetes.io/instance={name}"
    what = f"listing the pods of {name!r} in namespace {namespace!r}"
    found = call(
        cluster, what, client.CoreV1Api(cluster.api).list_namespaced_pod, namespace, label_selector=selector
    )
    items = cluster.api.sanitize_for_serialization(found).get("items") or []
    return sorted(items, key=lambda pod: str(pod["metadata"]["name"]))


def pod_logs(cluster: Cluster, pods_: list[dict[str, Any]], namespace: str) -> Iterator[str]:
    """Every pod's log so far, each line prefixed with ``[pod name]``."""
    from kubernetes import client

    api = client.CoreV1Api(cluster.api)
    for pod in pods_:
        pod_name = str(pod["metadata"]["name"])
        text = call(
            cluster, f"reading the log of pod {pod_name!r}", api.read_namespaced_pod_log, pod_name, namespace
        )
        for line in str(text or "").splitlines():
            yield f"[{pod_name}] {line}\n"
