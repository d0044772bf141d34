"""The public Python surface for where-am-I questions and strategy creation."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from tfdist import context
from tfdist.env import ClusterEnvironment, detect_environment
from tfdist.errors import ConfigError
from tfdist.strategies import build_strategy, discover_devices, options_from_environ, plan_strategy
from tfdist.strategies.plan import StrategyPlan


def rank() -> int:
    """This process's training rank (0 = chief); -1 for parameter servers and evaluators."""
    return context.current().environment.rank


def local_rank() -> int:
    """This process's index among the tasks on its node."""
    return context.current().environment.local_rank


def world_size() -> int:
    """Number of training processes (chief + workers)."""
    return context.current().environment.world_size


def backend() -> str:
    """This process's gradient-synchronisation backend: ``tf``, ``mpi`` or ``horovod`` (the built strategy's
    plan; before, TFDIST_BACKEND, whose ``auto`` is MPI under an MPI launcher)."""
    return context.current().backend


def num_replicas(strategy: Any) -> int:
    """Replicas that share each global batch across the whole job (``global = per_replica x this``): a
    process-level backend multiplies the strategy's replicas by the processes."""
    replicas = int(strategy.num_replicas_in_sync)
    return replicas * world_size() if context.current().process_level else replicas


def is_chief() -> bool:
    """True for the one process that writes shared outputs (checkpoints, summaries, saved models)."""
    return context.current().environment.is_chief


def plan(
    kind: str | None = None,
    devices: Sequence[int] | None = None,
    communication: str | None = None,
    collective_timeout: float | None = None,
    memory_growth: bool | None = None,
    cpu_replicas: int | None = None,
    memory_limit_mb: int | None = None,
    environment: ClusterEnvironment | None = None,
) -> StrategyPlan:
    """The plan :func:`strategy` would build with these arguments (None: the TFDIST_* variable, else the
    default)."""
    options = options_from_environ(
        os.environ,
        kind=kind,
        devices=tuple(devices) if devices is not None else None,
        communication=communication,
        collective_timeout=collective_timeout,
        memory_growth=memory_growth,
        cpu_replicas=cpu_replicas,
        memory_limit_mb=memory_limit_mb,
    )
    return plan_strategy(environment or detect_environment(), discover_devices(), options)


def strategy(
    kind: str = "auto",
    devices: Sequence[int] | None = None,
    communication: str | None = None,
    collective_timeout: float | None = None,
    memory_growth: bool | None = None,
    cpu_replicas: int | None = None,
    memory_limit_mb: int | None = None,
) -> Any:
    """Detect the environment, plan and build the tf.distribute strategy; call it first thing. ``kind``:
    auto | one_device | mirrored | multi_worker | parameter_server | tpu; arguments left at None come from
    the TFDIST_* variables. Parameter-server clusters' ps and worker tasks serve here and never return."""
    environment = detect_environment()
    chosen = plan(
        environment=environment,
        kind=None if kind == "auto" else kind,
        devices=devices,
        communication=communication,
        collective_timeout=collective_timeout,
        memory_growth=memory_growth,
        cpu_replicas=cpu_replicas,
        memory_limit_mb=memory_limit_mb,
    )
    before = context.built()
    if before is not None:
        old = before.plan
        assert old is not None
        if old != chosen:  # a second multi-worker strategy would re-initialise the first one's collectives
            raise ConfigError(
                f"tfdist.strategy() was already called in this process and built {old.kind} "
                f"({old.reason}); this call asks for {chosen.kind} ({chosen.reason}). One process holds one "
                "strategy. Hint: call tfdist.strategy() once and pass the strategy around."
            )
        return before.strategy
    built = build_strategy(chosen)
    context.record(environment, chosen, built)
    if chosen.kind == "multi_worker":
        from tfdist.keras import fix

        fix.install()  # model.fit under this strategy works from here on (a no-op for other strategies)
    return built
