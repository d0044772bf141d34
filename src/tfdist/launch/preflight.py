"""Checks of the surroundings before any process starts: one clear line instead of a broken job."""

from __future__ import annotations

import os
from collections.abc import Mapping

from tfdist.errors import ConfigError
from tfdist.launch.config import LaunchConfig

#: Extensions Python runs as scripts.
PYTHON_SUFFIXES = (".py", ".pyw", ".pyz")


def check_not_in_multi_task_step(environ: Mapping[str, str]) -> None:
    """``srun -n 4 tfdist launch -n 2 train.py`` would start 4 launchers of 2 workers each, none aware of
    the others: refuse with what to write instead."""
    tasks = environ.get("SLURM_STEP_NUM_TASKS", "")
    if "SLURM_STEP_ID" in environ and tasks.isdigit() and int(tasks) > 1:
        raise ConfigError(
            f"tfdist launch is running in each of the {tasks} tasks of a Slurm step (SLURM_STEP_NUM_TASKS={tasks}), "
            "so every task would start its own workers. Hint: let Slurm start the workers: "
            "srun tfdist run -- python train.py (or tfdist slurm submit -- python train.py)."
        )


def check_python_script(path: str) -> None:
    """A script that is not Python (a shell script, a binary) fails in every worker: say so once."""
    if path.endswith(PYTHON_SUFFIXES):
        return
    try:
        with open(path, "rb") as fh:
            head = fh.read(1024)
    except OSError as exc:
        raise ConfigError(f"script {path!r} cannot be read: {exc.strerror}.") from None
    first = head.split(b"\n", 1)[0]
    binary = b"\0" in head
    other_interpreter = first.startswith(b"#!") and b"python" not in first
    if binary or other_interpreter:
        what = "a binary file" if binary else f"a script for {first[2:].decode(errors='replace').strip()}"
        raise ConfigError(
            f"script {path!r} is not Python ({what}). Hint: for another program use "
            f"tfdist launch --no-python -n N {path}."
        )


def preflight(config: LaunchConfig, environ: Mapping[str, str] = os.environ) -> None:
    """Every check that needs the machine, before anything is started or written."""
    check_not_in_multi_task_step(environ)
    if config.command and not config.no_python and config.command[0] != "-m":
        check_python_script(config.command[0])
