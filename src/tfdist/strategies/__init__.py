"""Strategy planning (pure, :mod:`.plan`) and building (TensorFlow, :mod:`.build`)."""

from __future__ import annotations

from tfdist.strategies.build import build_strategy, discover_devices
from tfdist.strategies.plan import (
    LocalDevices,
    StrategyOptions,
    StrategyPlan,
    options_from_environ,
    plan_gpus,
    plan_strategy,
)

__all__ = [
    "LocalDevices",
    "StrategyOptions",
    "StrategyPlan",
    "build_strategy",
    "discover_devices",
    "options_from_environ",
    "plan_gpus",
    "plan_strategy",
]
