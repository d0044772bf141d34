"""``horovod.tensorflow`` on tfdist: change ``import horovod.tensorflow as hvd`` to
``import tfdist.horovod.tensorflow as hvd``; the rest of the script stays."""

from __future__ import annotations

import warnings
from typing import Any

from tfdist.horovod import compat, ops, runtime
from tfdist.horovod.compression import Compression
from tfdist.horovod.functions import (
    allgather,
    allreduce,
    alltoall,
    broadcast,
    broadcast_,
    broadcast_global_variables,
    broadcast_variables,
    grouped_allgather,
    grouped_allreduce,
    grouped_reducescatter,
    reducescatter,
)
from tfdist.horovod.gradients import DistributedGradientTape, PartialDistributedGradientTape
from tfdist.horovod.objects import allgather_object, broadcast_object, join
from tfdist.horovod.ops import Adasum, Average, Max, Min, Product, Sum
from tfdist.horovod.optimizer import DistributedOptimizer
from tfdist.horovod.runtime import ProcessSet, global_process_set
from tfdist.horovod.tensorflow import elastic

__all__ = [
    "Adasum",
    "Average",
    "Compression",
    "DistributedGradientTape",
    "DistributedOptimizer",
    "Max",
    "Min",
    "PartialDistributedGradientTape",
    "ProcessSet",
    "Product",
    "Sum",
    "allgather",
    "allgather_object",
    "allreduce",
    "alltoall",
    "broadcast",
    "broadcast_",
    "broadcast_global_variables",
    "broadcast_object",
    "broadcast_variables",
    "cross_rank",
    "cross_size",
    "elastic",
    "global_process_set",
    "grouped_allgather",
    "grouped_allreduce",
    "grouped_reducescatter",
    "init",
    "is_homogeneous",
    "is_initialized",
    "join",
    "local_rank",
    "local_size",
    "rank",
    "reducescatter",
    "shutdown",
    "size",
]


def init(comm: Any = None, process_sets: Any = None) -> None:
    """Start Horovod: ranks from MPI (any MPI launcher, ``tfdist launch --backend horovod``), or one
    process of size 1 when no launcher started this one."""
    if process_sets:
        raise NotImplementedError("hvd.init(process_sets=...) is not supported by tfdist's Horovod API.")
    compat.install()
    runtime.init(ops.execute, comm)


def shutdown() -> None:
    """End Horovod's state in this process."""
    runtime.shutdown()


def is_initialized() -> bool:
    """True after :func:`init`."""
    return runtime.is_initialized()


def rank() -> int:
    """This process's rank in the job."""
    return runtime.world().rank


def size() -> int:
    """Ranks in the job."""
    return runtime.world().size


def local_rank() -> int:
    """This process's rank on its node."""
    return runtime.world().local_rank


def local_size() -> int:
    """Ranks on this node."""
    return runtime.world().local_size


def cross_rank() -> int:
    """This node's index among the nodes (ranks with the same local rank)."""
    return runtime.world().cross_rank


def cross_size() -> int:
    """Nodes in the job (ranks with this local rank)."""
    return runtime.world().cross_size


def is_homogeneous() -> bool:
    """True when every node runs the same number of ranks."""
    return runtime.world().homogeneous


def rank_op(name: str | None = None) -> Any:
    """:func:`rank` as a tensor."""
    import tensorflow as tf

    return tf.constant(rank(), tf.int32, name=name)


def size_op(process_set_id: int = 0, name: str | None = None) -> Any:
    """:func:`size` as a tensor."""
    import tensorflow as tf

    return tf.constant(size(), tf.int32, name=name)


def local_rank_op(name: str | None = None) -> Any:
    """:func:`local_rank` as a tensor."""
    import tensorflow as tf

    return tf.constant(local_rank(), tf.int32, name=name)


def local_size_op(name: str | None = None) -> Any:
    """:func:`local_size` as a tensor."""
    import tensorflow as tf

    return tf.constant(local_size(), tf.int32, name=name)


def mpi_threads_supported() -> bool:
    """Whether MPI was initialised with MPI_THREAD_MULTIPLE."""
    world = runtime.world()
    return bool(world.mpi is not None and world.mpi.Query_thread() == world.mpi.THREAD_MULTIPLE)


def mpi_enabled() -> bool:
    """True when mpi4py is importable: tfdist's Horovod API then runs on MPI."""
    return runtime._mpi() is not None


mpi_built = mpi_enabled


def gloo_enabled() -> bool:
    """False: no Gloo controller."""
    return False


gloo_built = gloo_enabled


def nccl_built() -> int:
    """0: reductions run on the host (shared memory, MPI)."""
    return 0


def ddl_built() -> bool:
    """False."""
    return False


ccl_built = cuda_built = rocm_built = ddl_built


def start_timeline(file_path: str, mark_cycles: bool = False) -> None:
    """Horovod's timeline is not recorded here (use TensorFlow's profiler): a warning, nothing else."""
    del file_path, mark_cycles
    warnings.warn("hvd.start_timeline: no Horovod timeline under tfdist; use tf.profiler.", stacklevel=2)


def stop_timeline() -> None:
    """See :func:`start_timeline`."""


def add_process_set(process_set: Any) -> Any:
    """Not supported: every collective spans the whole job."""
    raise NotImplementedError("hvd.add_process_set is not supported by tfdist's Horovod API.")


remove_process_set = add_process_set


class SyncBatchNormalization:
    """Not provided: use Keras' own synchronised batch normalisation."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError(
            "hvd.SyncBatchNormalization is not supported by tfdist's Horovod API. Hint: "
            "keras.layers.BatchNormalization(synchronized=True) under tfdist.strategy()."
        )
