"""A pod of an Indexed Job (or of a JobSet) made by ``tfdist k8s manifest``: the job from the pod's variables.

Every pod has its index (``JOB_COMPLETION_INDEX``) and the hostname ``<job>-<index>``, which resolves as
``<job>-<i>.<service>`` through the headless Service; the manifest adds the pod count
(``TFDIST_WORLD_SIZE``), the Service (``TFDIST_K8S_SERVICE``) and the port (``TFDIST_PORT``), so every pod
computes the same cluster spec alone. TFJob pods are not detected here: their ``TF_CONFIG`` wins.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from tfdist import variables
from tfdist.env.base import ClusterEnvironment
from tfdist.errors import ConfigError
from tfdist.nodes import check_ports, cuda_visible_devices

#: The port every pod listens on when the manifest names none (the TFJob operator's default too).
DEFAULT_PORT = 2222
#: Set by the Job controller in every pod of an Indexed Job (Kubernetes 1.22+).
INDEX_VARIABLE = "JOB_COMPLETION_INDEX"
_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_HINT = "Hint: make the manifest with tfdist k8s manifest, which sets them."


def _int_var(environ: Mapping[str, str], name: str, minimum: int) -> int:
    raw = environ.get(name, "")
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not an integer (pod environment). {_HINT}") from None
    if value < minimum:
        raise ConfigError(f"{name}={value} is below {minimum} (pod environment). {_HINT}")
    return value


def pod_name_prefix(hostname: str, index: int) -> str:
    """What every pod's hostname starts with: the hostname without its trailing index.

    Input/Output: ``("train-1", 1)`` -> ``"train-"``; ``("train-worker-0-3", 3)`` -> ``"train-worker-0-"``
    (a JobSet's pods are ``<jobset>-<replicated job>-<job index>-<pod index>``).
    """
    suffix = f"-{index}"
    if not hostname.endswith(suffix) or len(hostname) == len(suffix):
        raise ConfigError(
            f"HOSTNAME={hostname!r} does not end with -{index} ({INDEX_VARIABLE}={index}), so the other "
            "pods' names cannot be derived. Hint: run the pod from an Indexed Job (completionMode: "
            "Indexed), whose pods are named <job>-<index>."
        )
    return hostname[: -len(str(index))]


class KubernetesEnvironment(ClusterEnvironment):
    """One pod of an Indexed Job: rank JOB_COMPLETION_INDEX of TFDIST_WORLD_SIZE, one process per pod."""

    kind = "kubernetes"

    @classmethod
    def detect(cls, environ: Mapping[str, str]) -> KubernetesEnvironment | None:
        """Detect a pod of a tfdist manifest (JOB_COMPLETION_INDEX and TFDIST_K8S_SERVICE set); another
        Indexed Job's pods may well be independent tasks."""
        if INDEX_VARIABLE not in environ or not variables.is_set("TFDIST_K8S_SERVICE", environ):
            return None
        service = str(variables.get("TFDIST_K8S_SERVICE", environ))
        if not _LABEL.match(service):
            raise ConfigError(
                f"TFDIST_K8S_SERVICE={service!r} is not a Service name (lower-case letters, digits and '-'). "
                f"{_HINT}"
            )
        if not variables.is_set("TFDIST_WORLD_SIZE", environ):
            raise ConfigError(
                f"TFDIST_K8S_SERVICE is set but TFDIST_WORLD_SIZE (the pod count) is not. {_HINT}"
            )
        workers = _int_var(environ, "TFDIST_WORLD_SIZE", 1)
        index = _int_var(environ, INDEX_VARIABLE, 0)
        if index >= workers:
            raise ConfigError(
                f"{INDEX_VARIABLE}={index} but TFDIST_WORLD_SIZE={workers}; an index must be below the pod "
                "count. Hint: parallelism and completions of the Job must equal TFDIST_WORLD_SIZE."
            )
        hostname = environ.get("HOSTNAME", "")
        if not hostname:
            raise ConfigError(
                "HOSTNAME is not set, so the pods' names cannot be derived. Hint: run in a pod."
            )
        port = DEFAULT_PORT
        if variables.is_set("TFDIST_PORT", environ):
            port = int(variables.get("TFDIST_PORT", environ))
            check_ports(port, 1, f"TFDIST_PORT={port}")
        prefix = pod_name_prefix(hostname, index)
        return cls(
            rank=index,
            world_size=workers,
            task_index=index,  # one process per pod (local rank 0 of 1), driving every GPU of the pod
            cluster_spec={"worker": [f"{prefix}{i}.{service}:{port}" for i in range(workers)]},
            gpu_ids=cuda_visible_devices(environ),
            # The device plugin already gave this pod (and only it) its GPUs.
            gpus_bound_by_scheduler=True,
            source=f"{INDEX_VARIABLE}={index}, HOSTNAME={hostname}, service {service}",
        )
