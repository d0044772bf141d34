"""ONE SEAM FOR SYNCHRONISATION: one replica step (:mod:`.step`) and a Synchroniser per backend.

:func:`synchroniser` picks the one for a strategy from the process's context (decided once, by
:func:`tfdist.strategy` or the environment). ``tfdist.fit``, ``tfdist.evaluate``/``predict`` and the bench
worker all train through it.
"""

from __future__ import annotations

from typing import Any

from tfdist.errors import ConfigError
from tfdist.sync.base import Synchroniser

__all__ = ["Synchroniser", "process_sync", "synchroniser"]

_PROCESS_SYNCS: dict[str, Any] = {}  # one per process: fit, evaluate and predict share its buffers


def synchroniser(strategy: Any) -> Synchroniser:
    """The synchroniser for ``strategy`` under this process's backend."""
    import tensorflow as tf

    from tfdist import context

    ctx = context.current()
    if isinstance(strategy, tf.distribute.experimental.ParameterServerStrategy):
        from tfdist.sync.parameter_server import ParameterServer

        return ParameterServer(strategy)
    if not ctx.process_level:
        from tfdist.sync.tf_collectives import TfCollectives

        return TfCollectives(strategy, ctx.environment.world_size, ctx.environment.rank)
    if strategy.num_replicas_in_sync != 1:
        raise ConfigError(
            f"the {ctx.backend} backend needs one device per process, but this strategy has several "
            "replicas. Hint: start one rank per GPU."
        )
    return process_sync(ctx.backend)


def process_sync(backend: str) -> Any:
    """This process's synchroniser of a process-level backend (``mpi`` or ``horovod``), made once."""
    if backend not in _PROCESS_SYNCS:
        if backend == "horovod":
            from tfdist.sync.horovod import HorovodSync

            _PROCESS_SYNCS[backend] = HorovodSync()
        else:
            from tfdist.sync.mpi import MPISync

            _PROCESS_SYNCS[backend] = MPISync()
    return _PROCESS_SYNCS[backend]
