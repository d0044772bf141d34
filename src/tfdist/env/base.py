"""The description of where this process runs, shared by every cluster kind."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar

#: Every role TensorFlow knows in a cluster spec.
KNOWN_ROLES = ("chief", "worker", "ps", "evaluator")

ClusterSpecDict = dict[str, list[str]]


@dataclass(frozen=True)
class ClusterEnvironment:
    """Where this process sits in a (possibly one-process) cluster.

    ``rank`` counts training tasks only (chief first, then workers; -1 for ps and evaluator tasks).
    ``cluster_spec`` is TensorFlow's role -> ``host:port`` lists, empty for a single process. ``gpu_ids``:
    the GPUs the scheduler made visible to this task (None: nothing restricts the view).
    """

    kind: ClassVar[str] = "base"

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int = 1
    role: str = "worker"
    task_index: int = 0
    cluster_spec: ClusterSpecDict = field(default_factory=dict)
    gpu_ids: tuple[str, ...] | None = None
    gpus_bound_by_scheduler: bool = False
    source: str = "default"
    warnings: tuple[str, ...] = ()

    @classmethod
    def detect(cls, environ: Mapping[str, str]) -> ClusterEnvironment | None:
        """This kind's environment when ``environ`` describes it, else None; ConfigError when its variables
        are inconsistent. Reads ``environ`` only: no writes, no subprocesses, no TensorFlow."""
        raise NotImplementedError

    @property
    def is_chief(self) -> bool:
        """True for the task that writes shared outputs (chief, or worker 0 when there is no chief)."""
        if self.role == "chief":
            return True
        return self.role == "worker" and self.task_index == 0 and "chief" not in self.cluster_spec

    @property
    def is_distributed(self) -> bool:
        """True when more than one process takes part (including parameter-server clusters)."""
        return sum(len(v) for k, v in self.cluster_spec.items() if k != "evaluator") > 1

    @property
    def has_parameter_servers(self) -> bool:
        """True when the cluster spec names at least one ``ps`` task."""
        return bool(self.cluster_spec.get("ps"))

    def describe(self) -> dict[str, object]:
        """A JSON-ready summary used by ``tfdist env``."""
        shown = (
            "kind source role task_index rank world_size local_rank local_world_size is_chief cluster_spec"
        )
        return {
            **{name: getattr(self, name) for name in shown.split()},
            "gpu_ids": list(self.gpu_ids) if self.gpu_ids is not None else None,
            "warnings": list(self.warnings),
        }
