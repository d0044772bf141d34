"""Does this worker's strategy span the job? Reported to the launcher through the attempt directory.

A script launched as N workers whose strategy does not span them trains N separate models, and TensorFlow
says nothing: each worker writes ``rank<R>.strategy.json`` and the launcher warns (``--strict``: stops).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from types import ModuleType
from typing import Any

from tfdist import files, variables
from tfdist.worker.contract import AttemptFiles

TARGET = "tensorflow.python.distribute.distribute_lib"


def watching(environ: Mapping[str, str] = os.environ) -> bool:
    """True in a worker of a multi-worker launch whose workers synchronise through the strategy."""
    world = (variables.raw("TFDIST_WORLD_SIZE", environ) or "1").strip()
    backend = (variables.raw("TFDIST_BACKEND", environ) or "tf").strip().lower()
    return (
        variables.is_set("TFDIST_ATTEMPT_DIR", environ)
        and world.isdigit()
        and int(world) > 1
        and backend in ("tf", "auto")
    )


def spans_job(strategy: Any) -> bool:
    """True when the strategy's collectives include other workers (or a parameter-server cluster)."""
    extended = getattr(strategy, "extended", None)
    in_mode = getattr(extended, "_in_multi_worker_mode", None)
    if callable(in_mode):
        with contextlib.suppress(Exception):  # a strategy mid-construction: decide on its class below
            return bool(in_mode())
    return type(strategy).__name__.startswith(("ParameterServerStrategy", "TPUStrategy"))


#: Classes whose public name differs (tf.distribute.MultiWorkerMirroredStrategy is this class).
PUBLIC_NAMES = {"CollectiveAllReduceStrategy": "MultiWorkerMirroredStrategy"}


def report(class_name: str, spans: bool, environ: Mapping[str, str] = os.environ) -> None:
    """Write this worker's record (atomically; the latest strategy wins)."""
    if not watching(environ):
        return
    attempt = AttemptFiles(str(variables.raw("TFDIST_ATTEMPT_DIR", environ)))
    path = attempt.record("strategy", variables.raw("TFDIST_RANK", environ) or "0")
    with contextlib.suppress(OSError):  # the check is advice; training goes on without it
        os.makedirs(attempt.directory, exist_ok=True)
        files.write_json(path, {"class": class_name, "spans": spans})


def _watch_strategies(module: ModuleType) -> None:
    base = module.StrategyBase
    original = base.__init__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        # The default strategy is made by any get_strategy() call: only a fit with no strategy counts.
        if type(self).__name__ != "_DefaultDistributionStrategy":
            name = type(self).__name__
            report(PUBLIC_NAMES.get(name, name), spans_job(self))

    __init__.__wrapped__ = original  # type: ignore[attr-defined]
    base.__init__ = __init__


def install() -> None:
    """Watch strategy construction in this worker (only in multi-worker TF-backend launches)."""
    if watching():
        from tfdist.worker.imports import after_import

        after_import(TARGET, _watch_strategies)
