"""What runs in a launched process before the user's code: hooks only, nothing imported eagerly."""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType

from tfdist import variables
from tfdist.worker.imports import after_import


def _gated(patch: Callable[[ModuleType], None]) -> Callable[[ModuleType], None]:
    """``patch`` for when its module loads, applied only under a Keras of the adapter table."""

    def hook(module: ModuleType) -> None:
        from tfdist.keras import fix

        if fix.gate():
            patch(module)

    return hook


def _whole_lines_under_mpi() -> None:
    """Under an MPI launcher that tags lines with the rank, write whole lines (an unbuffered stream writes
    a print's text and its newline apart, and each piece gets a tag: ``[1] line[1]``)."""
    import os
    import sys

    from tfdist.mpi.stack import MPI_RANK

    if not any(v in os.environ for v in MPI_RANK):
        return
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(line_buffering=True, write_through=False)


def start() -> None:
    """Record an uncaught exception for the launcher's report, and the steps for its hang check; install
    the Keras fix for when Keras loads (the fix itself honours ``TFDIST_KERAS_PATCH``)."""
    from tfdist.keras import callbacks, fix, metrics
    from tfdist.worker import errors, join, progress

    errors.install()
    join.install()
    progress.install()
    fix.ON_FIT_WITHOUT_STRATEGY.append(lambda: join.report("no strategy (the default strategy)", False))
    _whole_lines_under_mpi()
    if variables.get("TFDIST_HOROVOD_SHIM"):
        from tfdist.horovod import shim

        shim.install()  # `import horovod` gets tfdist's Horovod API (the launcher said so once)
    if not fix.enabled_by_env():
        return
    after_import(fix.TARGET, fix.patch_trainer)
    after_import(callbacks.TARGET, _gated(callbacks.patch_callback_list))
    after_import(fix.VARIABLES, _gated(fix.patch_variable_numbers))
    after_import(metrics.TARGET, _gated(fix.patch_metrics))
