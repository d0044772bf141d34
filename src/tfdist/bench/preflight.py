"""Checks of the surroundings before a benchmark starts anything (the config checks only its values)."""

from __future__ import annotations

import os

from tfdist.bench.config import BenchConfig
from tfdist.bench.plan import BenchPlan
from tfdist.errors import ConfigError
from tfdist.train.report import require_plots
from tfdist.workloads import datasets


def preflight(config: BenchConfig, plan: BenchPlan) -> None:
    """The output directory can take new results; the MPI launcher is there when a run needs it."""
    if os.path.exists(config.out) and not os.path.isdir(config.out):
        raise ConfigError(f"--out {config.out!r} is a file. Hint: give a directory.")
    if os.path.exists(os.path.join(config.out, "results.json")):
        raise ConfigError(
            f"--out {config.out!r} already holds results.json. Hint: choose a new --out directory."
        )
    datasets.require_packages(config.dataset)
    require_plots()
    if any(spec.backend == "mpi" for spec in plan.runs):
        from tfdist.mpi.probe import require_stack

        require_stack()  # SetupError with the install hint before anything runs
