"""FitOptions: the keyword arguments of ``tfdist.fit``, validated once."""

from __future__ import annotations

from dataclasses import dataclass

from tfdist.errors import ConfigError
from tfdist.train.scaling import RULES


@dataclass(frozen=True)
class FitOptions:
    """How long to train, how to batch, checkpoint and report."""

    epochs: int
    batch_size: int | None = None
    steps_per_epoch: int | None = None
    validation_batch_size: int | None = None
    verbose: int = 1
    checkpoint_dir: str | None = None
    checkpoint_every: int | None = None
    keep_checkpoints: int = 3
    lr_scaling: str = "none"
    warmup_epochs: float = 0.0
    shuffle: bool = True
    seed: int = 0
    run_dir: str | None = None
    tensorboard_dir: str | None = None
    jit_compile: bool = False
    log_every: int = 10
    #: "stop": a NaN/inf loss ends the run on every worker (NonFiniteLossError); "continue": train on.
    on_nan: str = "stop"

    def __post_init__(self) -> None:
        if isinstance(self.epochs, bool) or not isinstance(self.epochs, int) or self.epochs <= 0:
            raise ConfigError(f"epochs={self.epochs!r} must be a positive integer.")
        if self.checkpoint_every is not None and self.checkpoint_every < 1:
            raise ConfigError(f"checkpoint_every={self.checkpoint_every} must be at least 1 step.")
        if isinstance(self.log_every, bool) or not isinstance(self.log_every, int) or self.log_every < 1:
            raise ConfigError(f"log_every={self.log_every!r} must be a positive number of steps.")
        if self.keep_checkpoints < 1:
            raise ConfigError(f"keep_checkpoints={self.keep_checkpoints} must be at least 1.")
        if self.lr_scaling not in RULES:
            raise ConfigError(f"lr_scaling={self.lr_scaling!r} is unknown; choose one of {', '.join(RULES)}.")
        if self.on_nan not in ("stop", "continue"):
            raise ConfigError(f"on_nan={self.on_nan!r} is unknown; choose stop or continue.")
        if self.warmup_epochs < 0:
            raise ConfigError(f"warmup_epochs={self.warmup_epochs} must be 0 or more.")
