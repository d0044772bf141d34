"""tfdist: distributed TensorFlow/Keras training from a laptop to a cluster.

Create the strategy first thing with :func:`strategy`, build and compile the model in its scope, and
train with ``model.fit`` or ``tfdist.fit``; start several workers with ``tfdist launch``.

The names below load on first use (PEP 562): every launched worker imports a piece of tfdist before the
user's script runs, and that must not cost the import of the whole package.
"""

from __future__ import annotations

import importlib
import sys
import types
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
    "LaunchConfig": "tfdist.launch",
    "RunResult": "tfdist.launch",
    "launch": "tfdist.launch",
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
    from tfdist.launch import LaunchConfig, RunResult, launch  # noqa: F401
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


class _Package(types.ModuleType):
    """``tfdist.strategy`` and ``tfdist.launch`` are functions (the documented API) *and* subpackages
    (``from tfdist.launch.config import LaunchConfig``: import paths users write too). The first import of a
    subpackage sets it as an attribute of its parent, which would hide the function; the function wins.

    Why this override and no cleaner fix: an attribute holds one object, so one of the two must give way.
    Renamed subpackages break users' imports; callable modules (a ``__call__`` on the subpackages' class)
    make the documented functions modules to ``help()`` and type checkers; importing both subpackages while
    tfdist loads (the binding happens on the first import only) costs every launched worker the launcher's
    modules before its script starts, or, with lazy subpackages, holds only until someone adds an import
    there; a module-level ``__setattr__`` does not exist (PEP 562 gives ``__getattr__`` only). What stays
    out of reach: ``tfdist.launch.api`` as an attribute chain; import the module by its name instead.
    """

    def __setattr__(self, name: str, value: Any) -> None:
        if name in ("strategy", "launch") and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
