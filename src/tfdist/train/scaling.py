"""Learning-rate scaling with the number of replicas, and linear warm-up. Pure."""

from __future__ import annotations

import math

from tfdist.errors import ConfigError

RULES = ("linear", "sqrt", "none")


def scaled_lr(base_lr: float, replicas: int, rule: str) -> float:
    """The target learning rate for ``replicas`` replicas.

    Input/Output: ``(0.1, 4, "linear")`` -> 0.4; ``(0.1, 4, "sqrt")`` -> 0.2; ``(0.1, 4, "none")`` -> 0.1.
    """
    if rule not in RULES:
        raise ConfigError(f"lr_scaling={rule!r} is unknown; choose one of {', '.join(RULES)}.")
    if base_lr <= 0:
        raise ConfigError(f"learning rate {base_lr} must be positive.")
    factor = {"linear": float(replicas), "sqrt": math.sqrt(replicas), "none": 1.0}[rule]
    return base_lr * factor


def lr_at(step: int, base_lr: float, target_lr: float, warmup_steps: int) -> float:
    """Linear warm-up from ``base_lr`` to ``target_lr`` over ``warmup_steps`` steps, then constant."""
    if warmup_steps <= 0 or step >= warmup_steps:
        return target_lr
    return base_lr + (target_lr - base_lr) * step / warmup_steps
