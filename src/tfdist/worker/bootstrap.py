"""What runs in a launched process before the user's code: hooks only, nothing imported eagerly."""

from __future__ import annotations

from types import ModuleType

from tfdist import variables
from tfdist.worker.imports import after_import


def _patch_trainer(module: ModuleType) -> None:
    from tfdist.keras import fix

    fix.patch_trainer(module)


def _patch_variables(module: ModuleType) -> None:
    from tfdist.keras import fix

    if fix.gate():
        fix.patch_variable_numbers(module)


def _patch_metrics(module: ModuleType) -> None:
    from tfdist.keras import fix

    if fix.gate():
        fix.patch_metrics(module)


def _patch_callbacks(module: ModuleType) -> None:
    from tfdist.keras import callbacks, fix

    if fix.gate():
        callbacks.patch_callback_list(module)


def _whole_lines_under_mpi() -> None:
    """Under an MPI launcher that tags lines with the rank (``-prepend-rank``), write whole lines.

    An unbuffered stream writes a print's text and its newline separately, and the launcher tags each
    piece: ``[1] line[1]``. Line buffering keeps one write per line and still flushes every line.
    """
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
    after_import(fix.TARGET, _patch_trainer)
    after_import(callbacks.TARGET, _patch_callbacks)
    after_import(fix.VARIABLES, _patch_variables)
    after_import(metrics.TARGET, _patch_metrics)
