"""The user's Keras callbacks under ``tfdist.fit``: which run where, which need every step, and
``BackupAndRestore`` mapped onto tfdist's step-exact checkpoints.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tfdist.errors import ConfigError

#: Callbacks that write files: run on the chief only, or two workers would write the same file.
CHIEF_ONLY_CALLBACKS = ("CSVLogger", "TensorBoard", "ModelCheckpoint")
#: The hooks that, overridden, make tfdist read results after every training step.
TRAIN_BATCH_HOOKS = ("on_train_batch_begin", "on_train_batch_end", "on_batch_begin", "on_batch_end")


def overrides(callback: Any, hooks: Sequence[str]) -> bool:
    """True when ``callback``'s class defines one of ``hooks`` itself (not Keras' empty default)."""
    import keras

    base = keras.callbacks.Callback
    return any(getattr(type(callback), hook, None) is not getattr(base, hook) for hook in hooks)


def needs_every_step(callback: Any) -> bool:
    """Whether ``callback`` acts on training batches (not Keras' savers at their default frequency)."""
    name = type(callback).__name__
    if name == "ModelCheckpoint" and getattr(callback, "save_freq", "epoch") == "epoch":
        return False
    if name == "TensorBoard" and getattr(callback, "update_freq", "epoch") == "epoch":
        return False
    if name in ("History", "BackupAndRestore"):
        return False  # History is epoch-level; BackupAndRestore is mapped onto checkpoints
    return overrides(callback, TRAIN_BATCH_HOOKS)


@dataclass(frozen=True)
class Backup:
    """What a ``keras.callbacks.BackupAndRestore`` asks for, in tfdist's terms."""

    directory: str
    every: int | None  # steps between checkpoints; None: at each epoch end only
    delete_at_end: bool


def split_backup(callbacks: Sequence[Any]) -> tuple[list[Any], Backup | None]:
    """The callbacks without ``BackupAndRestore``, and what it asked for (None without one)."""
    kept: list[Any] = []
    backups: list[Any] = []
    for cb in callbacks:
        (backups if type(cb).__name__ == "BackupAndRestore" else kept).append(cb)
    if not backups:
        return kept, None
    if len(backups) > 1:
        raise ConfigError("two BackupAndRestore callbacks were given; pass one.")
    cb = backups[0]
    freq = getattr(cb, "save_freq", "epoch")
    if isinstance(freq, bool) or not (freq == "epoch" or (isinstance(freq, int) and freq > 0)):
        raise ConfigError(f"BackupAndRestore(save_freq={freq!r}) must be 'epoch' or a positive step count.")
    # double_checkpoint needs nothing: tfdist never leaves a half-written checkpoint as the latest.
    every = None if freq == "epoch" else int(freq)
    return kept, Backup(str(cb.backup_dir), every, bool(getattr(cb, "delete_checkpoint", True)))


def chief_filtered(callbacks: Sequence[Any], is_chief: bool) -> list[Any]:
    """Drop file-writing callbacks on non-chief workers (they would write the same files)."""
    return [cb for cb in callbacks if is_chief or type(cb).__name__ not in CHIEF_ONLY_CALLBACKS]
