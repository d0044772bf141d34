"""One schedule for every worker, decided at set-up from what each worker brought: workers may run different
callbacks, but must read results, checkpoint and stop at the same steps. Each worker's row
(:func:`setup_row`) is gathered once, and every worker derives the same :class:`Schedule` (:func:`agree`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tfdist.errors import ConfigError

#: Bytes of a checkpoint directory carried in a row (UTF-8); longer paths are refused with a hint.
PATH_BYTES = 512
#: Settings every worker must pass the same (name as the user wrote it, position in the row).
SAME = ("epochs", "batch size", "steps_per_epoch", "log_every", "initial_epoch")
_FLAGS = 2  # every_step, test_hooks
_HEAD = _FLAGS + len(SAME) + 2  # + checkpoint_every, has checkpoint_dir


@dataclass(frozen=True)
class Schedule:
    """What every worker does, the same everywhere."""

    every_step: bool  # read results after every training step (a worker's callback acts on batches)
    test_hooks: bool  # read results after every validation batch
    checkpoint_dir: str | None  # the chief's (a BackupAndRestore or checkpoint_dir given on the chief)
    checkpoint_every: int | None


def setup_row(
    every_step: bool,
    test_hooks: bool,
    same: tuple[int, ...],
    checkpoint_dir: str | None,
    checkpoint_every: int | None,
) -> np.ndarray:
    """This worker's row: its callbacks' needs, the settings of :data:`SAME` (in that order) and its
    checkpoint directory (as bytes).

    Input/Output: ``(True, False, (3, 64, 16, 10, 0), None, None)`` -> ``[1, 0, 3, 64, 16, 10, 0, 0, 0, 0…]``.
    """
    if len(same) != len(SAME):
        raise ValueError(f"expected {len(SAME)} settings, got {len(same)}")
    encoded = (checkpoint_dir or "").encode()
    if len(encoded) > PATH_BYTES:
        raise ConfigError(
            f"checkpoint_dir is {len(encoded)} bytes long (at most {PATH_BYTES}). Hint: use a shorter path."
        )
    row = np.zeros(_HEAD + PATH_BYTES, np.float64)
    row[:_FLAGS] = [float(every_step), float(test_hooks)]
    row[_FLAGS : _FLAGS + len(SAME)] = same
    row[_HEAD - 2 : _HEAD] = [float(checkpoint_every or 0), float(checkpoint_dir is not None)]
    row[_HEAD : _HEAD + len(encoded)] = np.frombuffer(encoded, np.uint8)
    return row


def _path(row: np.ndarray) -> str | None:
    raw = row[_HEAD:].astype(np.uint8).tobytes().rstrip(b"\0")
    return raw.decode(errors="replace") if row[_HEAD - 1] else None


def agree(table: np.ndarray) -> Schedule:
    """The schedule from every worker's row (row 0: the chief); ConfigError when they cannot be merged.
    Callback needs are merged; the checkpoint directory and frequency are the chief's (it alone writes)."""
    for index, name in enumerate(SAME):
        values = table[:, _FLAGS + index]
        if np.any(values != values[0]):
            given = ", ".join(f"rank {r}: {_show(v)}" for r, v in enumerate(values))
            raise ConfigError(
                f"tfdist.fit got different {name} on the workers ({given}). Hint: pass the same value on "
                "every worker (the batch size is the global one)."
            )
    chief = table[0]
    others = [r for r in range(1, len(table)) if table[r, _HEAD - 1] and not chief[_HEAD - 1]]
    if others:
        raise ConfigError(
            f"a checkpoint directory (checkpoint_dir or BackupAndRestore) was given on rank(s) "
            f"{', '.join(map(str, others))} but not on the chief (rank 0), which alone writes checkpoints. "
            "Hint: give it on every worker, or on the chief."
        )
    every = int(chief[_HEAD - 2]) or None
    return Schedule(bool(table[:, 0].any()), bool(table[:, 1].any()), _path(chief), every)


def check_resumed(table: np.ndarray, directory: str | None) -> None:
    """Every worker resumed from the same step (rows: [resumed, step]); ConfigError naming them if not."""
    if np.all(table == table[0]):
        return
    told = ", ".join(
        f"rank {r}: {'step ' + str(int(s)) if resumed else 'no checkpoint'}"
        for r, (resumed, s) in enumerate(table)
    )
    raise ConfigError(
        f"the workers found different checkpoints in {directory} ({told}). Hint: checkpoint_dir must be a "
        "directory every worker reads (a shared file system): the chief writes it, every worker resumes "
        "from it."
    )


def _show(value: float) -> str:
    return "None" if value < 0 else str(int(value))
