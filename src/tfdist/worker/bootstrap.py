"""What runs in a launched process before the user's code: hooks only, nothing imported eagerly."""

from __future__ import annotations

from types import ModuleType

from tfdist.worker.imports import after_import


def _patch_trainer(module: ModuleType) -> None:
    from tfdist.keras import fix

    fix.patch_trainer(module)


def _patch_callbacks(module: ModuleType) -> None:
    from tfdist.keras import callbacks, fix

    if fix.gate():
        callbacks.patch_callback_list(module)


def start() -> None:
    """Install the Keras fix for when Keras loads (the fix itself honours ``TFDIST_KERAS_PATCH``)."""
    from tfdist.keras import callbacks, fix

    if not fix.enabled_by_env():
        return
    after_import(fix.TARGET, _patch_trainer)
    after_import(callbacks.TARGET, _patch_callbacks)
