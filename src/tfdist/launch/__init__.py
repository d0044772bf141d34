"""START THE WORKERS: ``tfdist launch`` and :func:`launch`."""

from __future__ import annotations

from tfdist.launch.api import FailureInfo, RunResult, launch
from tfdist.launch.config import LaunchConfig

__all__ = ["FailureInfo", "LaunchConfig", "RunResult", "launch"]
