"""This process's environment, strategy and backend: fixed once by :func:`tfdist.strategy`, detected from
the environment on each call before."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tfdist import backends, variables
from tfdist.env import ClusterEnvironment, detect_environment
from tfdist.strategies.plan import StrategyPlan


@dataclass(frozen=True)
class Context:
    """This process's environment, and once built, its strategy plan and strategy."""

    environment: ClusterEnvironment
    backend: str
    plan: StrategyPlan | None = None
    strategy: Any = None

    @property
    def process_level(self) -> bool:
        """True when a synchroniser sums across processes, each running its own one-device strategy."""
        return self.backend in backends.PROCESS_BACKENDS


_BUILT: list[Context] = []  # the context fixed by tfdist.strategy(), at most one per process


def detected() -> Context:
    """The context as the environment describes it right now (no strategy)."""
    env = detect_environment()
    requested = str(variables.get("TFDIST_BACKEND")).lower()
    return Context(env, backends.choose(requested, source="TFDIST_BACKEND", under_mpi=env.kind == "mpi").name)


def current() -> Context:
    """The context fixed by :func:`tfdist.strategy`, or the detected one when none was built yet."""
    return built() or detected()


def record(environment: ClusterEnvironment, plan: StrategyPlan, strategy: Any) -> Context:
    """Fix this process's context: called once, by the first successful :func:`tfdist.strategy`."""
    _BUILT[:] = [Context(environment, plan.backend, plan, strategy)]
    return _BUILT[0]


def built() -> Context | None:
    """The context fixed by :func:`tfdist.strategy`, or None."""
    return _BUILT[0] if _BUILT else None
