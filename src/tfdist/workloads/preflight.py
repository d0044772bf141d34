"""Checks of the surroundings before ``tfdist train`` starts anything (the config checks only its values)."""

from __future__ import annotations

import os

from tfdist.errors import ConfigError
from tfdist.workloads.config import TrainConfig


def preflight(config: TrainConfig) -> None:
    """The weights file exists; the run directory is new, or resumed on purpose, and writable."""
    if config.weights and not os.path.isfile(config.weights):
        raise ConfigError(f"--weights {config.weights!r} does not exist.")
    if os.path.isdir(config.checkpoint_dir) and os.listdir(config.checkpoint_dir) and not config.resume:
        raise ConfigError(
            f"--output-dir {config.output_dir!r} already holds checkpoints. "
            "Hint: add --resume to continue it, or choose a new --output-dir."
        )
    parent = os.path.dirname(os.path.abspath(config.output_dir))
    if os.path.exists(parent) and not os.access(parent, os.W_OK):
        raise ConfigError(
            f"--output-dir {config.output_dir!r} is not writable. Hint: choose a directory you own."
        )
