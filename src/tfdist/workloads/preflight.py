"""Checks of the surroundings before ``tfdist train`` starts anything (the config checks only its values)."""

from __future__ import annotations

import os

from tfdist.errors import ConfigError
from tfdist.train.report import require_plots
from tfdist.workloads import datasets, files
from tfdist.workloads.config import TrainConfig


def preflight(config: TrainConfig) -> None:
    """The data and the weights file exist, with the packages they and the plots need; the run directory
    is new, or resumed on purpose, and writable. Checked before anything starts or is written: with
    ``--workers`` every worker would fail alike."""
    files.check_source(config.dataset)
    datasets.require_packages(config.dataset)
    require_plots()  # the run directory's curves.png
    if os.path.exists(config.run_dir) and not os.path.isdir(config.run_dir):
        raise ConfigError(f"--run-dir {config.run_dir!r} is a file. Hint: give a directory.")
    if config.resume and not _has_checkpoint(config.checkpoint_dir):
        raise ConfigError(
            f"--resume: no checkpoint to resume in {os.path.abspath(config.checkpoint_dir)!r}. Hint: give "
            "the --run-dir of the run to continue, or drop --resume to start a new run."
        )
    if config.weights and not os.path.isfile(config.weights):
        raise ConfigError(f"--weights {config.weights!r} does not exist.")
    if os.path.isdir(config.checkpoint_dir) and os.listdir(config.checkpoint_dir) and not config.resume:
        raise ConfigError(
            f"--run-dir {config.run_dir!r} already holds checkpoints. "
            "Hint: add --resume to continue it, or choose a new --run-dir."
        )
    parent = os.path.dirname(os.path.abspath(config.run_dir))
    if os.path.exists(parent) and not os.access(parent, os.W_OK):
        raise ConfigError(f"--run-dir {config.run_dir!r} is not writable. Hint: choose a directory you own.")


def _has_checkpoint(directory: str) -> bool:
    """A TensorFlow checkpoint index (``checkpoint``) or its data files are there."""
    if not os.path.isdir(directory):
        return False
    return any(name == "checkpoint" or name.endswith(".index") for name in os.listdir(directory))
