"""The state behind ``hvd.init()``: ranks from MPI (mpi4py), the node-local and cross-node groups, the MPI
backend's synchroniser, and process sets. Without mpi4py or an MPI launcher, the job is one process and
every collective returns its input, as Horovod does with one rank.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

#: The kinds of Horovod's collectives (tfdist.horovod.ops names them), run by the ``execute`` of init.
KINDS = ("ALLREDUCE", "ALLGATHER", "BROADCAST", "ALLTOALL", "REDUCESCATTER")

#: Horovod's own text, which users search for (and scripts catch as ValueError).
NOT_INITIALIZED = "Horovod has not been initialized; use hvd.init()."


@dataclass
class World:
    """The communicators of an initialised job."""

    comm: Any  # MPI_COMM_WORLD (mpi4py), or None in a one-process job without MPI
    mpi: Any  # the mpi4py.MPI module, or None
    rank: int
    size: int
    local_rank: int
    local_size: int
    cross_rank: int
    cross_size: int
    homogeneous: bool
    sync: Any = None  # tfdist.sync.mpi.MPISync: the packed float32 all-reduce (made on first use)
    coordinator: Any = None  # tfdist.sync.coordinator.Coordinator: name-matched collectives

    def float_sync(self) -> Any:
        """The MPI backend's synchroniser (one per process, shared with tfdist.fit)."""
        if self.sync is None:
            from tfdist.sync import process_sync

            self.sync = process_sync("mpi")
        return self.sync


_WORLD: list[World] = []
_LOCK = threading.Lock()


def _mpi() -> Any:
    """``mpi4py.MPI`` (started as :func:`tfdist.mpi.rank.import_mpi` starts it), or None without mpi4py."""
    from tfdist.errors import SetupError
    from tfdist.mpi.rank import import_mpi

    try:
        return import_mpi()
    except SetupError:
        return None


def init(execute: Callable[[list[Any]], None], comm: Any = None) -> None:
    """Start (or keep) the job's communicators; ``comm`` may be an mpi4py communicator or None (world);
    ``execute`` runs Horovod's matched collectives (:func:`tfdist.horovod.ops.execute`)."""
    with _LOCK:
        if not _WORLD:
            _WORLD.append(_coordinated(_world(_mpi(), comm), execute))


def _world(mpi: Any, comm: Any) -> World:
    if mpi is None:
        return World(None, None, 0, 1, 0, 1, 0, 1, True)
    # The collectives run on the MPI synchroniser's world: a communicator must be all of it.
    partial = comm is not None and hasattr(comm, "Get_size") and comm.Get_size() != mpi.COMM_WORLD.Get_size()
    if comm is not None and (partial or not hasattr(comm, "Get_rank")):
        raise NotImplementedError(
            "hvd.init(comm=[ranks]) (a subset of ranks) is not supported by tfdist's Horovod API; "
            "start the job with the ranks you want (tfdist launch -n N, mpirun -np N)."
        )
    world = comm if comm is not None else mpi.COMM_WORLD
    from tfdist.mpi.rank import check_world

    rank, size = world.Get_rank(), world.Get_size()
    check_world(size)
    node = world.Split_type(mpi.COMM_TYPE_SHARED, key=rank)
    cross = world.Split(node.Get_rank(), rank)
    even = len(set(world.allgather(node.Get_size()))) == 1
    return World(
        world, mpi, rank, size, node.Get_rank(), node.Get_size(), cross.Get_rank(), cross.Get_size(), even
    )


def _coordinated(world: World, execute: Callable[[list[Any]], None]) -> World:
    """``world`` with its coordinator: the MPI synchroniser's, which then also runs Horovod's collectives
    (one per process: Horovod's sums and ``tfdist.fit``'s share its packed buffer and never run at once)."""
    from tfdist.sync.coordinator import Coordinator

    if world.comm is None:
        world.coordinator = Coordinator(None, None, None, execute)
        return world
    sync = world.float_sync()  # made here, in the caller's thread: its MPI set-up is collective
    # Horovod's joined ranks take part in allreduces only (zeros); its other ops fail while one is joined.
    sync.register(KINDS, execute, joinable=("ALLREDUCE",))
    world.coordinator = sync.coordinator
    return world


def shutdown() -> None:
    """Forget the job's state (MPI itself stays up: mpi4py finalises it at exit)."""
    with _LOCK:
        _WORLD.clear()


def is_initialized() -> bool:
    """True between :func:`init` and :func:`shutdown`."""
    return bool(_WORLD)


class ProcessSet:
    """Horovod's process sets: tfdist supports the global one (every rank)."""

    process_set_id = 0

    def size(self) -> int:
        """Ranks in the set."""
        return world().size

    def rank(self) -> int:
        """This process's rank in the set."""
        return world().rank

    def included(self) -> bool:
        """Whether this process belongs to the set."""
        return True


global_process_set = ProcessSet()


def check_process_set(process_set: Any) -> None:
    """NotImplementedError for any process set but the global one."""
    if process_set is not global_process_set:
        raise NotImplementedError(
            "process sets other than hvd.global_process_set are not supported by tfdist's Horovod API."
        )


def world() -> World:
    """The initialised job; ValueError with Horovod's message before ``hvd.init()``."""
    if not _WORLD:
        raise ValueError(NOT_INITIALIZED)
    return _WORLD[0]
