"""TrainConfig: the options of ``tfdist train``, validated before any worker starts."""

from __future__ import annotations

import math
from dataclasses import dataclass

from tfdist import jsonconfig
from tfdist.errors import ConfigError
from tfdist.train.scaling import RULES
from tfdist.worker.contract import RunFiles
from tfdist.workloads import datasets, models

OPTIMIZERS = ("sgd", "adam")


@dataclass(frozen=True)
class TrainConfig:
    """What to train, on what, for how long, and where the run directory is."""

    workload: str = "mnist-cnn"
    dataset: str = "digits"
    epochs: int = 5
    batch_size_per_replica: int = 32
    #: The job's batch, fixed whatever the replica count (each replica gets its share); None: the
    #: per-replica batch times the replicas.
    global_batch_size: int | None = None
    lr: float = 0.05
    optimizer: str = "sgd"
    lr_scaling: str = "none"
    warmup_epochs: float = 0.0
    run_dir: str = "tfdist-runs/train"
    resume: bool = False
    checkpoint_every: int | None = None
    steps_per_epoch: int | None = None
    seed: int = 0
    xla: bool = False
    mixed_precision: str | None = None
    weights: str | None = None
    data_dir: str | None = None
    image_size: int = 64
    on_nan: str = "stop"

    def __post_init__(self) -> None:
        if self.workload not in models.NAMES:
            raise ConfigError(
                f"--workload {self.workload!r} is unknown; choose one of {', '.join(models.NAMES)}."
            )
        try:
            datasets.check_name(self.dataset)
        except ConfigError as exc:
            raise ConfigError(f"--dataset: {exc}") from None
        if self.epochs <= 0:
            raise ConfigError(f"--epochs={self.epochs} must be at least 1.")
        if self.batch_size_per_replica <= 0:
            raise ConfigError(f"--batch-size-per-replica={self.batch_size_per_replica} must be at least 1.")
        if self.global_batch_size is not None and self.global_batch_size <= 0:
            raise ConfigError(f"--global-batch-size={self.global_batch_size} must be at least 1.")
        if not (math.isfinite(self.lr) and self.lr > 0):
            raise ConfigError(f"--lr={self.lr} must be a positive, finite number.")
        if self.optimizer not in OPTIMIZERS:
            raise ConfigError(
                f"--optimizer {self.optimizer!r} is unknown; choose one of {', '.join(OPTIMIZERS)}."
            )
        if self.lr_scaling not in RULES:
            raise ConfigError(
                f"--lr-scaling {self.lr_scaling!r} is unknown; choose one of {', '.join(RULES)}."
            )
        if not math.isfinite(self.warmup_epochs) or self.warmup_epochs < 0:
            raise ConfigError(f"--warmup-epochs={self.warmup_epochs} must be 0 or more.")
        if self.checkpoint_every is not None and self.checkpoint_every < 1:
            raise ConfigError(f"--checkpoint-every={self.checkpoint_every} must be at least 1 step.")
        if self.steps_per_epoch is not None and self.steps_per_epoch < 1:
            raise ConfigError(f"--steps-per-epoch={self.steps_per_epoch} must be at least 1.")
        if self.on_nan not in ("stop", "continue"):
            raise ConfigError(f"--on-nan {self.on_nan!r} is unknown; choose stop or continue.")
        if self.mixed_precision not in (None, "bf16", "fp16"):
            raise ConfigError(f"--mixed-precision {self.mixed_precision!r}: use bf16 or fp16.")

    def to_json(self) -> str:
        """This config as JSON: how ``tfdist train --workers`` hands it to its workers."""
        return jsonconfig.to_json(self)

    @classmethod
    def from_json(cls, text: str, where: str = "train config") -> TrainConfig:
        """The config :meth:`to_json` wrote (checked again)."""
        return jsonconfig.from_json(cls, text, where)

    @property
    def checkpoint_dir(self) -> str:
        """Where the chief keeps checkpoints."""
        return RunFiles(self.run_dir).checkpoints
