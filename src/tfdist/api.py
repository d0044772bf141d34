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


def _same_as_before(before: context.Context, chosen: StrategyPlan) -> Any:
    """The strategy already built when ``chosen`` is its plan; else one error (a second multi-worker
    strategy in one process would re-initialise the collectives under the first one's variables)."""
    assert before.plan is not None
    if before.plan != chosen:
        plan = before.plan
        raise ConfigError(
            f"tfdist.strategy() was already called in this process and built {plan.kind} "
            f"({plan.reason}); this call asks for {chosen.kind} ({chosen.reason}). One process holds one "
            "strategy. Hint: call tfdist.strategy() once and pass the strategy around."
        )
    return before.strategy


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
    """The gradient-synchronisation backend of this process: ``tf`` (the strategy's collectives), ``mpi``
    or ``horovod``. The strategy's plan decides once built; before, TFDIST_BACKEND (tf | mpi | horovod |
    auto; ``auto`` is MPI under an MPI process manager).
    """
    return context.current().backend


def num_replicas(strategy: Any) -> int:
    """Replicas that share each global batch across the whole job: ``global = per_replica x this``.

    With the MPI backend every process runs its own strategy, so the processes multiply its replicas;
    with TensorFlow's collectives the strategy already counts every worker's replicas.
    """
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
    """The plan :func:`strategy` would build with these arguments.

    ``None`` means: the TFDIST_* variable, else the default.
    """
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
    """Detect the environment, plan and build the tf.distribute strategy. Call it first thing.

    ``kind``: auto | one_device | mirrored | multi_worker | parameter_server | tpu. Arguments left at
    ``None`` come from TFDIST_STRATEGY, TFDIST_COMMUNICATION, TFDIST_COLLECTIVE_TIMEOUT (default 300 s),
    TFDIST_CPU_REPLICAS. In a parameter-server cluster, ps and worker tasks serve here and never return.
    """
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
        return _same_as_before(before, chosen)
    built = build_strategy(chosen)
    context.record(environment, chosen, built)
    if chosen.kind == "multi_worker":
        from tfdist.keras import fix

        fix.install()  # model.fit under this strategy works from here on (a no-op for other strategies)
    return built
