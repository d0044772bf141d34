"""RUNS INSIDE EVERY LAUNCHED PROCESS, before the user's code: launchers put :func:`boot_dir` first on
``PYTHONPATH``, whose ``sitecustomize`` calls :func:`tfdist.worker.bootstrap.start`, so a plain
``tf.distribute`` script that never imports tfdist still gets the Keras fix.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

#: Set in a process's environment when the tfdist bootstrap should run there.
BOOT_MARK = "TFDIST_BOOTSTRAP"
#: gRPC channel options for TensorFlow's servers: a worker whose first connection reaches a peer still
#: importing TensorFlow would otherwise wait gRPC's default reconnect backoff (1 s, growing).
GRPC_OPTIONS = (
    "grpc.initial_reconnect_backoff_ms=50,grpc.min_reconnect_backoff_ms=50,grpc.max_reconnect_backoff_ms=1000"
)


def boot_dir() -> str:
    """The directory holding tfdist's ``sitecustomize.py``."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "boot")


def with_bootstrap(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` plus the bootstrap: :func:`boot_dir` first on PYTHONPATH (once) and the mark set, and
    :data:`GRPC_OPTIONS` unless ``TF_GRPC_DEFAULT_OPTIONS`` is already set.

    Input/Output: ``{"PYTHONPATH": "/a"}`` -> ``{"PYTHONPATH": "<boot>:/a", "TFDIST_BOOTSTRAP": "1",
    "TF_GRPC_DEFAULT_OPTIONS": GRPC_OPTIONS}``.
    """
    out = dict(env)
    parts = [p for p in out.get("PYTHONPATH", "").split(os.pathsep) if p and p != boot_dir()]
    out["PYTHONPATH"] = os.pathsep.join([boot_dir(), *parts])
    out[BOOT_MARK] = "1"
    out.setdefault("TF_GRPC_DEFAULT_OPTIONS", GRPC_OPTIONS)
    return out
