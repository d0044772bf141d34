"""FitOptions: the keyword arguments of ``tfdist.fit``, validated once."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tfdist.errors import ConfigError
from tfdist.sync.wire import check_bucket_setting, check_compression
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
    #: Keras' ``model.fit`` arguments, with Keras' meaning.
    class_weight: Any = None
    validation_split: float = 0.0
    initial_epoch: int = 0
    validation_freq: Any = 1
    validation_steps: int | None = None
    #: A directory: each rank writes a Chrome trace of its steps there (tfdist.train.timeline).
    timeline: str | None = None
    #: The MPI backend's gradients across nodes: none, fp16 or bf16 (lossy); None: TFDIST_COMPRESSION.
    compression: str | None = None
    #: The MPI backend's gradient bucket size in MB (0: one sum after the backward pass); None:
    #: TFDIST_BUCKET_MB.
    bucket_mb: float | str | None = None
    #: Whether each worker's data is its own (tfdist.train.uneven); None: decided from the data.
    per_worker_data: bool | None = None
    #: The MPI backend: each rank keeps the optimizer's slots of 1/N of the weights (tfdist.sync.shard);
    #: None: TFDIST_SHARD_OPTIMIZER.
    shard_optimizer: bool | None = None

    def __post_init__(self) -> None:
        if self.compression is not None:
            object.__setattr__(self, "compression", check_compression(self.compression, "compression"))
        if self.bucket_mb is not None:
            object.__setattr__(self, "bucket_mb", check_bucket_setting(self.bucket_mb, "bucket_mb"))
        if self.timeline is not None and (not isinstance(self.timeline, str) or not self.timeline):
            raise ConfigError(f"timeline={self.timeline!r} must be a directory path (a non-empty string).")
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
        if self.per_worker_data not in (None, True, False):
            given = self.per_worker_data
            raise ConfigError(f"per_worker_data={given!r} must be True, False or None (from the data).")
        if self.shard_optimizer not in (None, True, False):
            given = self.shard_optimizer
            raise ConfigError(
                f"shard_optimizer={given!r} must be True, False or None (TFDIST_SHARD_OPTIMIZER)."
            )
        if self.warmup_epochs < 0:
            raise ConfigError(f"warmup_epochs={self.warmup_epochs} must be 0 or more.")
        self._check_keras_arguments()

    def _check_keras_arguments(self) -> None:
        if not _is_int(self.initial_epoch) or self.initial_epoch < 0:
            raise ConfigError(f"initial_epoch={self.initial_epoch!r} must be an integer >= 0.")
        if self.initial_epoch >= self.epochs:
            raise ConfigError(
                f"initial_epoch={self.initial_epoch} is not below epochs={self.epochs}: nothing would "
                f"train. Hint: epochs is the index of the last epoch plus one (as in Keras), e.g. "
                f"epochs={self.initial_epoch + 1}."
            )
        split = self.validation_split
        if isinstance(split, bool) or not isinstance(split, int | float) or not 0 <= split < 1:
            raise ConfigError(f"validation_split={split!r} must be a fraction in [0, 1).")
        if self.validation_steps is not None and (
            not _is_int(self.validation_steps) or self.validation_steps < 1
        ):
            raise ConfigError(f"validation_steps={self.validation_steps!r} must be a positive integer.")
        freq = self.validation_freq
        ok = (_is_int(freq) and freq >= 1) or (
            isinstance(freq, list | tuple) and bool(freq) and all(_is_int(e) and e >= 1 for e in freq)
        )
        if not ok:
            raise ConfigError(
                f"validation_freq={freq!r} must be a positive integer (validate every N epochs) or a list of "
                "epoch numbers counted from 1 (as in Keras)."
            )

    def validates_after(self, epoch: int) -> bool:
        """Keras' rule: validate after 0-based ``epoch`` when its 1-based number is due."""
        number = epoch + 1
        if isinstance(self.validation_freq, list | tuple):
            return number in self.validation_freq
        return number % int(self.validation_freq) == 0


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
