"""START THE WORKERS: ``tfdist launch`` and :func:`launch`."""

from __future__ import annotations

from tfdist.launcher.api import FailureInfo, RunResult, launch
from tfdist.launcher.config import LaunchConfig

__all__ = ["FailureInfo", "LaunchConfig", "RunResult", "launch"]
