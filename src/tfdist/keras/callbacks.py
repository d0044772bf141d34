"""File-writing Keras callbacks under a multi-worker ``model.fit``: the chief writes, the others do not race.

Every worker runs the same callbacks (a save may need every worker): non-chief workers write to a private
temporary directory, as Keras 2 did; ``BackupAndRestore`` reads the chief's backup on every worker.
"""

from __future__ import annotations

import os
import shutil
from typing import Any

from tfdist import files, resize, variables
from tfdist._log import get_logger
from tfdist.keras import adapters
from tfdist.keras.checks import is_multi_worker, worker_identity

log = get_logger(__name__)
#: The Keras module whose CallbackList is patched.
TARGET = "keras.src.callbacks.callback_list"


def private_dir(task_id: int) -> str:
    """A fresh temporary directory for this worker's throw-away files, removed at exit."""
    return files.scratch_dir(f"tfdist-worker{task_id}-")


def moved_path(path: str, into: str) -> str:
    """``path`` re-rooted under ``into``, keeping any ``{epoch}``-style template in its directories.

    Input/Output: ``("out/ckpt-{epoch}.keras", "/tmp/w1")`` -> ``"/tmp/w1/ckpt-{epoch}.keras"``;
    ``("out/{epoch}/m.keras", "/tmp/w1")`` -> ``"/tmp/w1/out/{epoch}/m.keras"``.
    """
    head, tail = os.path.split(path)
    return os.path.join(into, path.lstrip(os.sep) if "{" in head else tail)


def redirect(callback: Any, task_id: int) -> bool:
    """Point one non-chief worker's file-writing callback away from the chief's files. True if changed."""
    if getattr(callback, "_tfdist_redirected", False):
        return False
    name = type(callback).__name__
    if name == "ModelCheckpoint":
        asked = str(callback.filepath)
        callback.filepath = moved_path(asked, private_dir(task_id))
        _remember_writes(callback, asked)
    elif name == "CSVLogger":
        callback.filename = moved_path(str(callback.filename), private_dir(task_id))
    elif name == "TensorBoard":
        callback.log_dir = private_dir(task_id)
    elif name == "BackupAndRestore":
        _read_chief_write_private(callback, private_dir(task_id))
    else:
        return False
    callback._tfdist_redirected = True
    log.debug("worker %d: %s writes to a private temp dir (the chief writes the real files)", task_id, name)
    return True


#: A non-chief worker's checkpoints tfdist redirected: the path the script named -> where this worker wrote.
WRITTEN: dict[str, str] = {}


def readable(path: Any) -> Any:
    """What to read for ``path`` in this worker: its own redirected copy when no file is at ``path``."""
    if not isinstance(path, (str, os.PathLike)):
        return path
    mine = WRITTEN.get(os.path.abspath(os.fspath(path)))
    return mine if mine and not os.path.exists(path) and os.path.exists(mine) else path


def _remember_writes(callback: Any, asked: str) -> None:
    """Note each save's pair of paths, so that reading the named one back in this worker finds the file."""
    private, get_path = callback.filepath, callback._get_file_path

    def _get_file_path(epoch: Any, batch: Any, logs: Any) -> Any:
        mine = get_path(epoch, batch, logs)
        callback.filepath = asked
        try:
            WRITTEN[os.path.abspath(get_path(epoch, batch, logs))] = os.path.abspath(mine)
        finally:
            callback.filepath = private
        return mine

    callback._get_file_path = _get_file_path
    _read_back_through(readable)


def _read_back_through(mapped: Any) -> None:
    """Keras' checkpoint readers (``load_model``, ``Model.load_weights``) read ``mapped(path)`` (once)."""
    import keras

    if getattr(keras.Model.load_weights, "_tfdist_read_back", False):
        return
    load_model, load_weights = keras.saving.load_model, keras.Model.load_weights

    def read_model(filepath: Any, *args: Any, **kwargs: Any) -> Any:
        return load_model(mapped(filepath), *args, **kwargs)

    def read_weights(self: Any, filepath: Any, *args: Any, **kwargs: Any) -> Any:
        return load_weights(self, mapped(filepath), *args, **kwargs)

    read_weights._tfdist_read_back = True  # type: ignore[attr-defined]
    keras.saving.load_model = keras.models.load_model = read_model
    keras.Model.load_weights = read_weights


def _read_chief_write_private(callback: Any, into: str) -> None:
    read_paths = {name: getattr(callback, name) for name in backup_paths()}
    write_paths = {name: moved_path(path, into) for name, path in read_paths.items()}
    chief_dir, save = callback.backup_dir, callback._save_model

    def save_privately() -> None:
        # Keras' _save_model writes backup_dir and the four paths: swap in the private ones for the write.
        callback.backup_dir = into
        for name, path in write_paths.items():
            setattr(callback, name, path)
        try:
            save()
        finally:
            callback.backup_dir = chief_dir
            for name, path in read_paths.items():
                setattr(callback, name, path)

    def train_end(logs: Any = None) -> None:
        shutil.rmtree(into, ignore_errors=True)  # the chief deletes its own directory, never a worker

    callback._save_model = save_privately
    callback.on_train_end = train_end


def grow_at_epoch_end(callbacks: list[Any]) -> None:
    """With a ``BackupAndRestore`` that saves each epoch, a launched job may grow at an epoch's end: after
    the backup the workers vote and, when the launcher asked (:mod:`tfdist.resize`), all exit. Added last."""
    backups = [c for c in callbacks if type(c).__name__ == "BackupAndRestore"]
    if not variables.raw("TFDIST_ATTEMPT_DIR"):  # no launcher to ask (set alike on every worker)
        return
    if not backups or backups[0].save_freq != "epoch" or any(type(c).__name__ == "_Grow" for c in callbacks):
        return
    import keras

    class _Grow(keras.callbacks.Callback):
        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            if epoch + 1 >= int(self.params.get("epochs") or 0):
                return  # the last epoch: nothing to resume
            strategy = self.model.distribute_strategy
            votes = float(resize.requested())
            if is_multi_worker(strategy):
                import tensorflow as tf

                per_replica = strategy.run(lambda: tf.constant(votes))
                votes = float(strategy.reduce("SUM", per_replica, axis=None))
            if votes:
                if worker_identity(strategy)[0]:
                    print(f"the job grows: the backup of epoch {epoch + 1} is written; it resumes there.")
                raise SystemExit(resize.EXIT_CODE)

        def on_train_end(self, logs: Any = None) -> None:
            resize.withdraw()

    callbacks.append(_Grow())
    resize.offer("model.fit with BackupAndRestore")


def backup_paths() -> tuple[str, ...]:
    """BackupAndRestore's private path attributes in the installed Keras (a field of its adapter row)."""
    adapter = adapters.adapter_for(adapters.keras_version())
    return adapter.backup_paths if adapter is not None else ()


def patch_callback_list(module: Any) -> None:
    """Make Keras' ``CallbackList`` redirect non-chief file callbacks when its model is multi-worker."""
    cls = module.CallbackList
    if getattr(cls.set_model, "__wrapped__", None):
        return
    original = cls.set_model

    def set_model(self: Any, model: Any) -> None:
        # Before Keras' own set_model: TensorBoard fixes its write directory there.
        strategy = getattr(model, "_distribute_strategy", None)
        if strategy is not None and is_multi_worker(strategy):
            chief, task_id = worker_identity(strategy)
            if not chief:
                for callback in self.callbacks:
                    redirect(callback, task_id)
        grow_at_epoch_end(self.callbacks)
        original(self, model)

    set_model.__wrapped__ = original  # type: ignore[attr-defined]
    cls.set_model = set_model
