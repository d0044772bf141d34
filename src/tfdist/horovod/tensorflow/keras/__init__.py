"""``horovod.tensorflow.keras`` on tfdist: change ``import horovod.tensorflow.keras as hvd`` to
``import tfdist.horovod.tensorflow.keras as hvd``; ``model.fit`` with ``hvd.DistributedOptimizer`` and
``hvd.callbacks.*`` then trains one model across all ranks on Keras 3."""

from __future__ import annotations

from typing import Any

import numpy as np

from tfdist.horovod import compat, functions
from tfdist.horovod.compression import Compression
from tfdist.horovod.optimizer import DistributedOptimizer, PartialDistributedOptimizer, load_model
from tfdist.horovod.tensorflow import (
    Average,
    Sum,
    cross_rank,
    cross_size,
    global_process_set,
    init,
    is_homogeneous,
    is_initialized,
    local_rank,
    local_size,
    mpi_built,
    mpi_enabled,
    mpi_threads_supported,
    rank,
    shutdown,
    size,
)
from tfdist.horovod.tensorflow.keras import callbacks, elastic

__all__ = [
    "Average",
    "Compression",
    "DistributedOptimizer",
    "PartialDistributedOptimizer",
    "Sum",
    "allgather",
    "allreduce",
    "broadcast",
    "broadcast_global_variables",
    "callbacks",
    "cross_rank",
    "cross_size",
    "elastic",
    "global_process_set",
    "init",
    "is_homogeneous",
    "is_initialized",
    "load_model",
    "local_rank",
    "local_size",
    "mpi_built",
    "mpi_enabled",
    "mpi_threads_supported",
    "rank",
    "shutdown",
    "size",
]

compat.install()  # this module imports Keras anyway: its Keras 2 idioms work from here on


def allreduce(
    value: Any,
    name: str | None = None,
    average: bool | None = None,
    prescale_factor: float = 1.0,
    postscale_factor: float = 1.0,
    op: int | None = None,
    compression: Any = Compression.none,
) -> np.ndarray:
    """The reduction of a NumPy value or tensor over all ranks, as a NumPy array (Keras' flavour)."""
    reduced = functions.allreduce(
        _numpy(value),
        op=op,
        average=average,
        compression=compression,
        prescale_factor=prescale_factor,
        postscale_factor=postscale_factor,
    )
    return _numpy(reduced)


def allgather(value: Any, name: str | None = None) -> np.ndarray:
    """Every rank's value concatenated on the first dimension, as a NumPy array."""
    return _numpy(functions.allgather(_numpy(value)))


def broadcast(value: Any, root_rank: int, name: str | None = None) -> np.ndarray:
    """``root_rank``'s value on every rank, as a NumPy array."""
    return _numpy(functions.broadcast(_numpy(value), root_rank))


def _numpy(value: Any) -> np.ndarray:
    return np.asarray(value.numpy() if hasattr(value, "numpy") else value)


def broadcast_global_variables(root_rank: int) -> None:
    """Not available on Keras 3 (no global variable collection): use the callback or the variables."""
    raise NotImplementedError(
        "hvd.broadcast_global_variables needs TensorFlow 1's global variables. Hint: "
        "hvd.callbacks.BroadcastGlobalVariablesCallback(0) in model.fit, or "
        "hvd.broadcast_variables(model.variables, root_rank=0)."
    )
