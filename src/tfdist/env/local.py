"""A single process on this machine: the fallback that always detects."""

from __future__ import annotations

from collections.abc import Mapping

from tfdist.env.base import ClusterEnvironment
from tfdist.nodes import cuda_visible_devices


class LocalEnvironment(ClusterEnvironment):
    """One process, rank 0 of 1. Respects ``CUDA_VISIBLE_DEVICES`` when it is set."""

    kind = "local"

    @classmethod
    def detect(cls, environ: Mapping[str, str]) -> LocalEnvironment:
        """Always succeeds: every process is at least a local one."""
        return cls(gpu_ids=cuda_visible_devices(environ), source="no cluster variables")
