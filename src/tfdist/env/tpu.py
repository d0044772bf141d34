"""A Cloud TPU host (TPU VM, Colab or GKE), detected from variables only (the strategy builds
TPUClusterResolver); the test suite has no TPU: detection and planning are tested, the strategy is not."""

from __future__ import annotations

from collections.abc import Mapping

from tfdist.env.base import ClusterEnvironment

#: Variables set by the TPU runtimes tfdist knows, in the order they name the TPU.
TPU_VARIABLES = ("TPU_NAME", "COLAB_TPU_ADDR", "KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS", "TPU_ACCELERATOR_TYPE")


class TPUEnvironment(ClusterEnvironment):
    """One host of a TPU slice; ``tpu_name`` is what TPUClusterResolver receives ('' = local TPU VM)."""

    kind = "tpu"

    @property
    def tpu_name(self) -> str:
        """The TPU address or name to resolve; '' means the TPU attached to this VM."""
        return self.source.partition("=")[2]

    @classmethod
    def detect(cls, environ: Mapping[str, str]) -> TPUEnvironment | None:
        """Detect a TPU runtime from its variables; worker id and host list give rank and world size."""
        found = next((name for name in TPU_VARIABLES if environ.get(name)), None)
        if found is None:
            return None
        name = "" if found == "TPU_ACCELERATOR_TYPE" else environ[found]
        if found == "COLAB_TPU_ADDR":
            name = f"grpc://{name}"
        hosts = [h for h in environ.get("TPU_WORKER_HOSTNAMES", "").split(",") if h]
        rank = int(environ.get("TPU_WORKER_ID", "0") or 0)
        return cls(rank=rank, world_size=max(1, len(hosts)), task_index=rank, source=f"{found}={name}")
