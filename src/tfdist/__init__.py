"""tfdist: distributed TensorFlow/Keras training from a laptop to a cluster.

Create the strategy first thing with :func:`strategy`, build and compile the model in its scope, and
train with ``tfdist.fit``; start several workers with ``tfdist launch``.
"""

from __future__ import annotations

from tfdist.api import backend, is_chief, local_rank, num_replicas, plan, rank, strategy, world_size
from tfdist.env import detect_environment
from tfdist.errors import ConfigError, SetupError, TfdistError, WorkerFailedError
from tfdist.launch import LaunchConfig, RunResult, launch
from tfdist.train import fit
from tfdist.train.save import save_model

__version__ = "0.1.0"

__all__ = [
    "ConfigError",
    "LaunchConfig",
    "RunResult",
    "SetupError",
    "TfdistError",
    "WorkerFailedError",
    "__version__",
    "backend",
    "detect_environment",
    "fit",
    "is_chief",
    "launch",
    "local_rank",
    "num_replicas",
    "plan",
    "rank",
    "save_model",
    "strategy",
    "world_size",
]
