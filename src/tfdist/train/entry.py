"""``tfdist.fit``: synchronous data-parallel training with Keras ergonomics under any strategy.

Picks the trainer for the model's strategy: :class:`tfdist.train.loop.SyncTrainer`, or
:class:`tfdist.train.ps.ParameterServerTrainer` under ParameterServerStrategy.
"""

from __future__ import annotations

import math
import os
import shutil
from collections.abc import Sequence
from typing import Any

from tfdist.errors import ConfigError
from tfdist.sync.shard import check_not_parameter_server
from tfdist.train.batches import check_arrays, sample_inputs
from tfdist.train.callbacks import Backup, split_backup
from tfdist.train.loop import SyncTrainer
from tfdist.train.options import FitOptions
from tfdist.train.ps import ParameterServerTrainer
from tfdist.train.trainer import ensure_built, is_parameter_server, strategy_of


def fit(
    model: Any,
    train_data: Any,
    *,
    epochs: int,
    validation_data: Any = None,
    callbacks: Sequence[Any] = (),
    **options: Any,
) -> Any:
    """Train ``model`` (built and compiled in the strategy's scope) and return a Keras ``History``.

    ``train_data``: a tf.data.Dataset batched by the GLOBAL batch, a ``dataset_fn(input_context)``
    returning per-replica batches (with ``steps_per_epoch`` and ``batch_size``), or NumPy ``(x, y)`` with
    ``batch_size`` (global). Keyword options are the fields of :class:`tfdist.train.options.FitOptions`
    (``model.fit``'s own with Keras' meaning; ``log_every``: steps between reads of the results, 1 whenever a
    callback overrides a training batch hook). ``keras.callbacks.BackupAndRestore`` becomes
    ``checkpoint_dir`` (its ``save_freq`` steps: ``checkpoint_every``).

    Losses are averaged over the global batch; metrics are summed over every replica and worker, so all
    workers return the same history. With ``checkpoint_dir`` the run saves every ``checkpoint_every``
    steps and at each epoch end, and resumes from the newest checkpoint. SIGTERM/SIGUSR2 checkpoint at the
    next step boundary on all workers, then raise SystemExit(128 + signal).
    """
    callbacks, backup = split_backup(list(callbacks))
    if backup is not None:
        options = with_backup(options, backup)
    try:
        fit_options = FitOptions(epochs=epochs, **options)
    except TypeError as exc:
        raise ConfigError(f"tfdist.fit: {exc}") from None
    configure_wire(fit_options)
    if fit_options.validation_split and validation_data is None:
        train_data, validation_data = split_for_validation(train_data, fit_options.validation_split)
    # One sample for everything that needs the data's structure (a dataset_fn is called once).
    sample = sample_inputs(train_data)
    ensure_built(model, sample[0])
    trainer = ParameterServerTrainer if is_parameter_server(strategy_of(model)) else SyncTrainer
    if trainer is ParameterServerTrainer:
        check_not_parameter_server(fit_options.shard_optimizer)
    history = trainer(model, train_data, validation_data, callbacks, fit_options, sample).run()
    if backup is not None and backup.delete_at_end:
        remove_backup(backup.directory)
    return history


def configure_wire(options: FitOptions) -> None:
    """Hand ``compression`` / ``bucket_mb`` to the MPI backend (ConfigError for another backend)."""
    from tfdist import context
    from tfdist.sync import process_sync
    from tfdist.sync.wire import WireOptions

    backend = context.current().backend
    if backend != "mpi":
        if options.compression not in (None, "none") or options.bucket_mb not in (None, 0, 0.0, "auto"):
            given = f"compression={options.compression!r}, bucket_mb={options.bucket_mb!r}"
            raise ConfigError(
                f"tfdist.fit({given}) is for the mpi backend, but this run's backend is {backend}. Hint: "
                "launch with --backend mpi, or leave these options out."
            )
        return
    default = WireOptions.from_environment()
    process_sync("mpi").configure(
        WireOptions(
            default.compression if options.compression is None else options.compression,
            default.bucket_mb if options.bucket_mb is None else options.bucket_mb,
        )
    )


def with_backup(options: dict[str, Any], backup: Backup) -> dict[str, Any]:
    """``fit``'s options with a ``BackupAndRestore``'s directory and frequency as tfdist checkpoints."""
    given = options.get("checkpoint_dir")
    if given and os.path.abspath(given) != os.path.abspath(backup.directory):
        raise ConfigError(
            f"checkpoint_dir={given!r} and BackupAndRestore(backup_dir={backup.directory!r}) name two "
            "directories; pass one of them."
        )
    merged = {**options, "checkpoint_dir": backup.directory}
    if backup.every is not None and merged.get("checkpoint_every") is None:
        merged["checkpoint_every"] = backup.every
    return merged


def remove_backup(directory: str) -> None:
    """``BackupAndRestore(delete_checkpoint=True)``: a finished run leaves no backup (chief only)."""
    from tfdist import context

    if context.current().environment.is_chief:
        shutil.rmtree(directory, ignore_errors=True)


def split_for_validation(train_data: Any, fraction: float) -> tuple[Any, Any]:
    """Keras' ``validation_split``: the LAST ``fraction`` of NumPy ``(x, y)`` validates, before shuffling."""
    if not isinstance(train_data, tuple | list):
        raise ConfigError(
            f"validation_split={fraction} needs NumPy (x, y) training data (as in Keras); got "
            f"{type(train_data).__name__}. Hint: pass validation_data= instead."
        )
    x, y = check_arrays(train_data)
    split_at = math.floor(len(x) * (1.0 - fraction))
    if split_at in (0, len(x)):
        raise ConfigError(
            f"validation_split={fraction} of {len(x)} examples leaves "
            f"{'no training' if split_at == 0 else 'no validation'} example. Hint: choose another fraction."
        )
    return (x[:split_at], y[:split_at]), (x[split_at:], y[split_at:])
