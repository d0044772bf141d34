"""tfdist: distributed TensorFlow/Keras training from a laptop to a cluster. The names below load on first
use (PEP 562): every worker imports a piece of tfdist before the user's script, not the whole package."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

#: public name -> module that defines it
_EXPORTS = {
    "backend": "tfdist.api",
    "is_chief": "tfdist.api",
    "local_rank": "tfdist.api",
    "num_replicas": "tfdist.api",
    "plan": "tfdist.api",
    "rank": "tfdist.api",
    "strategy": "tfdist.api",
    "world_size": "tfdist.api",
    "detect_environment": "tfdist.env",
    "ConfigError": "tfdist.errors",
    "SetupError": "tfdist.errors",
    "TfdistError": "tfdist.errors",
    "WorkerFailedError": "tfdist.errors",
    "NonFiniteLossError": "tfdist.errors",
    "LaunchConfig": "tfdist.launcher",
    "RunResult": "tfdist.launcher",
    "launch": "tfdist.launcher",
    "fit": "tfdist.train",
    "evaluate": "tfdist.train",
    "predict": "tfdist.train",
    "save_model": "tfdist.train.save",
}

__all__ = ["__version__", *sorted(_EXPORTS)]

if TYPE_CHECKING:
    from tfdist.api import backend, is_chief, local_rank, num_replicas, plan, rank, strategy, world_size  # noqa: F401
    from tfdist.env import detect_environment  # noqa: F401
    from tfdist.errors import (  # noqa: F401
        ConfigError,
        NonFiniteLossError,
        SetupError,
        TfdistError,
        WorkerFailedError,
    )
    from tfdist.launcher import LaunchConfig, RunResult, launch  # noqa: F401
    from tfdist.train import evaluate, fit, predict  # noqa: F401
    from tfdist.train.save import save_model  # noqa: F401


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'tfdist' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
