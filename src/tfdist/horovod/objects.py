"""Horovod's collectives of Python objects (``hvd.broadcast_object``, ``allgather_object``) and
``hvd.join``, on tfdist's MPI runtime."""

from __future__ import annotations

from typing import Any

import numpy as np

from tfdist.horovod import runtime
from tfdist.horovod.runtime import check_process_set, global_process_set


def broadcast_object(
    obj: Any, root_rank: int = 0, session: Any = None, name: str | None = None, **_: Any
) -> Any:
    """``root_rank``'s Python object on every rank (pickled). Polled, not blocking: a rank that never
    calls it ends the job after TFDIST_COLLECTIVE_TIMEOUT with one line, as every collective does."""
    world = runtime.world()
    if world.size == 1:
        return obj
    label = f"broadcast_object {name!r}" if name else "broadcast_object"
    return world.float_sync().broadcast_object(obj, root_rank, world.comm, label)


def allgather_object(obj: Any, session: Any = None, name: str | None = None, **_: Any) -> list[Any]:
    """Every rank's Python object, in rank order (pickled; polled as :func:`broadcast_object`)."""
    world = runtime.world()
    if world.size == 1:
        return [obj]
    label = f"allgather_object {name!r}" if name else "allgather_object"
    return world.float_sync().allgather_object(obj, world.comm, label)


def join(device: str = "", process_set: Any = global_process_set) -> Any:
    """Horovod's join: this rank has no more batches and adds zeros to the others' allreduces (other
    collectives fail meanwhile) until every rank joined. Returns the last rank to join (int32 scalar)."""
    import tensorflow as tf

    check_process_set(process_set)
    coordinator = runtime.world().coordinator
    if tf.executing_eagerly():
        return tf.constant(coordinator.join(), tf.int32)
    last = tf.numpy_function(
        lambda: np.int32(coordinator.join()), [], tf.int32, stateful=True, name="HorovodJoin"
    )
    return tf.ensure_shape(last, [])
