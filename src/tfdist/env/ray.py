"""A process Ray started (a task, an actor, a Ray Train worker, a Ray job's entrypoint)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from tfdist.env.base import ClusterEnvironment
from tfdist.nodes import cuda_visible_devices

#: Set by Ray in every process it starts (the raylet that owns the worker); never in a plain shell.
RAY_MARKER = "RAY_RAYLET_PID"


@dataclass(frozen=True)
class RayEnvironment(ClusterEnvironment):
    """One process on a Ray node: rank 0 of 1 until a ``TF_CONFIG`` (detected first: Ray Train's and
    ``tfdist launch --ray``'s workers have one) joins it to others; its GPUs are those Ray assigned."""

    kind = "ray"

    ray_address: str | None = None
    ray_job_id: str | None = None

    @classmethod
    def detect(cls, environ: Mapping[str, str]) -> RayEnvironment | None:
        """``RAY_RAYLET_PID`` set: a process Ray started; ``None`` otherwise."""
        if not environ.get(RAY_MARKER):
            return None
        gpus = cuda_visible_devices(environ)
        return cls(
            gpu_ids=gpus,
            gpus_bound_by_scheduler=gpus is not None,
            source=f"{RAY_MARKER} (a process Ray started)",
            ray_address=environ.get("RAY_ADDRESS") or None,
            ray_job_id=environ.get("RAY_JOB_ID") or None,
        )

    def describe(self) -> dict[str, object]:
        """The common summary plus the Ray job and cluster address (when Ray exported it)."""
        return {**super().describe(), "ray": {"address": self.ray_address, "job_id": self.ray_job_id}}
