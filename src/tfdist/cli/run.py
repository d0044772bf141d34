"""``tfdist run -- COMMAND``: run one task of a cluster job (e.g. ``srun tfdist run -- python train.py``)."""

from __future__ import annotations

import argparse
from typing import Any

from tfdist.cli.argtypes import command_words


def register(sub: Any) -> None:
    """Add ``run``."""
    p = sub.add_parser(
        "run",
        help="run COMMAND as this task's worker of the job (srun tfdist run -- python train.py)",
        description=(
            "Derive this task's worker environment from the scheduler (TF_CONFIG from the Slurm step, rank "
            "variables, one GPU per task, the Keras model.fit fix) and run COMMAND."
        ),
    )
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND... (e.g. -- python train.py)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Run the command as this task's worker; its exit code (see :func:`tfdist.worker.task.run_task`)."""
    from tfdist.worker.task import run_task

    return run_task(command_words(args.command))
