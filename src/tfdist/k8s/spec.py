"""K8sJobSpec: one training job on Kubernetes, checked before any manifest is written. Pure."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from tfdist.errors import ConfigError
from tfdist.nodes import check_ports

#: The objects ``--kind`` can make: an Indexed Job with its headless Service (any cluster), a JobSet (the
#: JobSet controller), a TFJob (Kubeflow's v1 training operator).
KINDS = ("job", "jobset", "tfjob")
#: A DNS-1123 label: what Kubernetes allows as a Job, Service, namespace or volume name.
_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
#: A DNS-1123 subdomain: what a PersistentVolumeClaim may be called.
_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
#: A resource quantity as Kubernetes writes them: 500m, 2, 1.5, 8Gi, 512M.
_QUANTITY = re.compile(r"^(\d+(\.\d+)?|\.\d+)(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
#: The replicated job of a JobSet; its pods are <jobset>-worker-0-<index>.
JOBSET_REPLICATED_JOB = "worker"
#: Variables the manifest itself sets; --env cannot override them.
RESERVED_ENV = ("TFDIST_WORLD_SIZE", "TFDIST_K8S_SERVICE", "TFDIST_PORT", "TF_CONFIG", "JOB_COMPLETION_INDEX")


@dataclass(frozen=True)
class K8sJobSpec:
    """A job of ``workers`` pods, each running ``tfdist run -- CMD`` (or ``tfdist launch -n K SCRIPT``)."""

    command: tuple[str, ...]
    image: str
    workers: int = 2
    name: str = "train"
    namespace: str | None = None
    kind: str = "job"
    gpus_per_worker: int = 0
    cpu: str | None = None
    memory: str | None = None
    #: (claim name, mount path) pairs: a PersistentVolumeClaim mounted in every pod (data, checkpoints).
    pvcs: tuple[tuple[str, str], ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    #: The port every pod listens on for TensorFlow's gRPC traffic.
    port: int = 2222
    #: How often the whole job may start again after a failure (each time from its checkpoint).
    max_restarts: int = 3
    #: The interpreter in the image that has tfdist installed.
    python: str = "python"
    #: Training processes per pod: 1 runs the command itself; K > 1 runs ``tfdist launch -n K`` in the pod,
    #: listening on ``port`` .. ``port + K - 1`` (the pods' launchers read the job as ``tfdist run`` does).
    nproc_per_pod: int = 1

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ConfigError(f"--kind {self.kind!r} is not one of {', '.join(KINDS)}.")
        _check_label("--name", self.name)
        if self.namespace is not None:
            _check_label("--namespace", self.namespace)
        self._check_numbers()
        self._check_text()
        self.pod_command()  # a command tfdist launch cannot start is refused here
        longest = self.pod_hostname(self.workers - 1)
        if len(longest) > 63:
            raise ConfigError(
                f"--name {self.name!r} makes pod hostnames such as {longest!r} of {len(longest)} characters; "
                "Kubernetes allows 63. Hint: a shorter --name."
            )
        for claim, path in self.pvcs:
            check_pvc(claim, path)
        for name, _ in self.env:
            if not _ENV_NAME.match(name):
                raise ConfigError(f"--env {name!r} is not a variable name (letters, digits and _).")
            if name in RESERVED_ENV:
                raise ConfigError(f"--env {name} is set by the manifest itself; leave it out.")

    def _check_numbers(self) -> None:
        if self.workers < 1:
            raise ConfigError(f"--pods {self.workers}: a job needs at least 1 worker (one pod each).")
        if self.gpus_per_worker < 0:
            raise ConfigError(f"--gpus-per-pod {self.gpus_per_worker} is negative; give 0 or more.")
        check_ports(self.port, 1, f"--port {self.port}")
        if self.max_restarts < 0:
            raise ConfigError(f"--max-restarts {self.max_restarts} is negative; give 0 or more.")
        self._check_procs()
        for flag, value in (("--cpus-per-pod", self.cpu), ("--memory-per-pod", self.memory)):
            if value is not None and (not _QUANTITY.match(value) or not float(_number_part(value))):
                raise ConfigError(
                    f"{flag} {value!r} is not a positive Kubernetes quantity. Hint: e.g. --cpus-per-pod 4 or "
                    "500m, --memory-per-pod 16Gi."
                )

    def _check_procs(self) -> None:
        k = self.nproc_per_pod
        if k < 1:
            raise ConfigError(f"--nproc-per-pod {k}: a pod needs at least 1 training process.")
        if k == 1:
            return
        if self.kind == "tfjob":
            raise ConfigError(
                f"--nproc-per-pod {k} with --kind tfjob: the training operator gives each pod one TF_CONFIG, "
                "one process. Hint: --kind job or jobset, or --nproc-per-pod 1."
            )
        if self.gpus_per_worker not in (0, k):
            raise ConfigError(
                f"--nproc-per-pod {k} with --gpus-per-pod {self.gpus_per_worker}: each process drives one "
                f"GPU. Hint: --gpus-per-pod {k} (or 0 on CPU)."
            )
        check_ports(self.port, k, f"--port {self.port}", "processes per pod (--nproc-per-pod)")

    def pod_command(self) -> tuple[str, ...]:
        """What every pod runs: ``tfdist run -- CMD``, or ``tfdist launch -n K ...`` for K processes.

        Input/Output: ``python train.py --epochs 3`` with K=4 and 4 GPUs ->
        ``python -m tfdist launch -n 4 --run-dir /tmp/tfdist-run train.py --epochs 3``.
        """
        k = self.nproc_per_pod
        if k == 1:
            return (self.python, "-m", "tfdist", "run", "--", *self.command)
        first, rest = self.command[0], self.command[1:]
        if os.path.basename(first).startswith("python"):
            if not rest or (rest[0].startswith("-") and rest[0] != "-m"):
                raise ConfigError(
                    f"--nproc-per-pod {k}: the command must be `python SCRIPT ...` or `python -m MODULE ...` "
                    f"(tfdist launch starts the interpreter of each process), not {' '.join(self.command)!r}."
                )
            script: tuple[str, ...] = rest
        else:
            script = ("--no-python", *self.command)
        cpu = ("--cpu",) if not self.gpus_per_worker else ()
        # /tmp: a container's working directory may be read-only; the logs also go to `kubectl logs`.
        launch = (self.python, "-m", "tfdist", "launch", "-n", str(k), *cpu, "--run-dir", "/tmp/tfdist-run")
        return (*launch, *script)

    def _check_text(self) -> None:
        if not self.command:
            raise ConfigError(
                "no command to run. Hint: tfdist k8s manifest --image IMG [options] -- python train.py ..."
            )
        if not self.image.strip() or any(c.isspace() for c in self.image):
            raise ConfigError(f"--image {self.image!r} is not an image reference (e.g. registry/tf:2.21).")
        for value in (*self.command, self.image, self.python, *(v for _, v in self.env)):
            if _CONTROL.search(value):
                raise ConfigError(
                    f"value {value!r} contains a newline or control character; a manifest cannot carry it "
                    "safely."
                )

    @property
    def service(self) -> str:
        """The headless Service (the pods' DNS subdomain): the job's own name, as JobSet names it too."""
        return self.name

    def pod_hostname(self, index: int) -> str:
        """The hostname Kubernetes gives pod ``index`` of this job's kind (``train-1``, ``train-worker-0-1``
        in a JobSet, ``train-worker-1`` in a TFJob)."""
        if self.kind == "jobset":
            return f"{self.name}-{JOBSET_REPLICATED_JOB}-0-{index}"
        if self.kind == "tfjob":
            return f"{self.name}-worker-{index}"
        return f"{self.name}-{index}"


def _number_part(value: str) -> str:
    return re.sub(r"[A-Za-z]+$", "", value)


def _check_label(flag: str, value: str) -> None:
    if len(value) > 63 or not _LABEL.match(value):
        raise ConfigError(
            f"{flag} {value!r} is not a DNS-1123 label (at most 63 lower-case letters, digits and '-', "
            "starting and ending with a letter or digit). Hint: e.g. resnet-train."
        )


def check_pvc(claim: str, path: str) -> None:
    """ConfigError when a ``--pvc`` claim name or mount path is unusable."""
    if len(claim) > 253 or not _SUBDOMAIN.match(claim):
        raise ConfigError(
            f"--pvc {claim}:{path}: claim {claim!r} is not a PersistentVolumeClaim name (lower-case letters, "
            "digits, '-' and '.')."
        )
    if not path.startswith("/") or ":" in path or _CONTROL.search(path):
        raise ConfigError(
            f"--pvc {claim}:{path}: the mount path {path!r} must be an absolute path without ':'. Hint: "
            "--pvc data:/data."
        )


def parse_pvc(text: str) -> tuple[str, str]:
    """Split ``--pvc NAME:PATH``.

    Input/Output: ``"ckpt:/ckpt"`` -> ``("ckpt", "/ckpt")``; ``"ckpt"`` -> ConfigError (no path).
    """
    claim, sep, path = text.partition(":")
    if not sep or not path:
        raise ConfigError(
            f"--pvc {text!r} has no mount path. Hint: --pvc CLAIM:PATH, e.g. --pvc ckpt:/ckpt mounts the "
            "claim ckpt at /ckpt in every pod."
        )
    check_pvc(claim, path)
    return claim, path


def parse_env(text: str) -> tuple[str, str]:
    """Split ``--env NAME=VALUE``.

    Input/Output: ``"TF_ENABLE_ONEDNN_OPTS=0"`` -> ``("TF_ENABLE_ONEDNN_OPTS", "0")``.
    """
    name, sep, value = text.partition("=")
    if not sep:
        raise ConfigError(f"--env {text!r} must be NAME=VALUE.")
    return name, value
