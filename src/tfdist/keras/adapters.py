"""What differs between the Keras 3 releases the fix serves: ONE table, keyed by Keras version range.

Every version-dependent choice of :mod:`tfdist.keras.fix` is a field of :class:`KerasAdapter`; nothing else
compares Keras versions. Pure. Adding a release: add or widen a row, and run ``./dev compat``.
"""

from __future__ import annotations

from dataclasses import dataclass

from tfdist.installed import find

Version = tuple[int, int]


@dataclass(frozen=True)
class KerasAdapter:
    """How one range of Keras releases ``[low, high)`` is patched (the table of the Keras guide)."""

    low: Version
    high: Version
    #: The trainer has ``_maybe_symbolic_build`` (3.5 on), replaced; before, inputs are checked on entry.
    symbolic_build: bool
    #: What an epoch yields: ``enumerate_epoch`` / ``pairs`` (step, it) or ``triples`` (begin, end, it).
    epoch_steps: str
    #: ``BackupAndRestore``'s private path attributes a non-chief worker moves (3.7 added the previous pair).
    backup_paths: tuple[str, ...]
    #: Keras' base variable class (``KerasVariable`` until 3.7), whose ``float()`` / ``int()`` are patched.
    variable_class: str
    #: What Keras' optimizer does with the replicas' gradients: ``none``, ``sum`` or ``scaled`` (right).
    gradients: str
    #: The TensorFlow trainer's class (``TensorFlowTrainer`` until 3.16 renamed it ``Trainer``).
    trainer_class: str
    #: Keras creates metric variables on-read (3.10 on); before, tfdist does (:mod:`tfdist.keras.metrics`).
    metrics_on_read: bool

    def covers(self, version: Version) -> bool:
        return self.low <= version < self.high

    @property
    def name(self) -> str:
        return f">={_text(self.low)},<{_text(self.high)}"


_BACKUP = ("_weights_path", "_training_metadata_path")
_BACKUP_PREV = (*_BACKUP, "_prev_weights_path", "_prev_training_metadata_path")
_TT = "TensorFlowTrainer"

#: Every Keras release range the fix is written for, oldest first; each row's oldest and newest release
#: is trained by ``devtools/compat.py`` (results: benchmarks/results/compat.json).
ADAPTERS: tuple[KerasAdapter, ...] = (
    # fields: low, high, symbolic_build, epoch_steps, backup_paths, variable_class, gradients, trainer_class,
    # metrics_on_read
    KerasAdapter((3, 3), (3, 5), False, "enumerate_epoch", _BACKUP, "KerasVariable", "none", _TT, False),
    KerasAdapter((3, 5), (3, 7), True, "enumerate_epoch", _BACKUP, "KerasVariable", "sum", _TT, False),
    KerasAdapter((3, 7), (3, 8), True, "pairs", _BACKUP_PREV, "Variable", "sum", _TT, False),
    KerasAdapter((3, 8), (3, 10), True, "pairs", _BACKUP_PREV, "Variable", "scaled", _TT, False),
    KerasAdapter((3, 10), (3, 11), True, "pairs", _BACKUP_PREV, "Variable", "scaled", _TT, True),
    KerasAdapter((3, 11), (3, 16), True, "triples", _BACKUP_PREV, "Variable", "scaled", _TT, True),
    KerasAdapter((3, 16), (3, 17), True, "triples", _BACKUP_PREV, "Variable", "scaled", "Trainer", True),
)

#: The oldest Keras each TensorFlow release accepts (its wheel's ``Requires-Dist: keras>=``); pip pairs a
#: TensorFlow with the newest Keras its Python allows (Keras 3.11+ needs Python 3.10, 3.13+ Python 3.11).
TF_KERAS_FLOOR: dict[Version, Version] = {
    (2, 16): (3, 0),
    (2, 17): (3, 2),
    (2, 18): (3, 5),
    (2, 19): (3, 5),
    (2, 20): (3, 10),
    (2, 21): (3, 12),
}


def _text(version: Version) -> str:
    return f"{version[0]}.{version[1]}"


def keras_version() -> str:
    """The Keras this Python imports, read without importing it; ``"0"`` without one."""
    return find("keras").version or "0"


def version_tuple(text: str) -> Version:
    """(major, minor) of a version string.

    Input/Output: ``"3.15.1"`` -> ``(3, 15)``; ``"3.16.0.dev2026"`` -> ``(3, 16)``; ``"0"`` -> ``(0, 0)``.
    """
    parts = [int("".join(ch for ch in p if ch.isdigit()) or 0) for p in text.split(".")[:2]]
    padded = [*parts, 0, 0]
    return padded[0], padded[1]


def adapter_for(keras_version: str) -> KerasAdapter | None:
    """The row of :data:`ADAPTERS` that serves ``keras_version``; None outside the table."""
    version = version_tuple(keras_version)
    return next((row for row in ADAPTERS if row.covers(version)), None)


def supported_range() -> tuple[Version, Version]:
    """The whole Keras range of the table, ``[low, high)`` (rows are contiguous)."""
    return ADAPTERS[0].low, ADAPTERS[-1].high


def supported_spec() -> str:
    """The table's range as a pip specifier: ``">=3.3,<3.16"``."""
    low, high = supported_range()
    return f">={_text(low)},<{_text(high)}"


def install_hint(tf_version: str | None) -> str:
    """The Keras to install beside ``tf_version``: the table's range, raised to what that TF accepts."""
    low, high = supported_range()
    floor = TF_KERAS_FLOOR.get(version_tuple(tf_version or "0"), low)
    return f"pip install 'keras>={_text(max(low, floor))},<{_text(high)}'"


def unsupported_message(keras_version: str, keras_path: str, tf_version: str | None) -> str:
    """One line for a Keras outside the table: what was found, where, and the Keras to install."""
    tf_part = f" beside TensorFlow {tf_version}" if tf_version else ""
    return (
        f"Keras {keras_version} (from {keras_path}){tf_part} is outside the releases tfdist's model.fit fix "
        f"supports under MultiWorkerMirroredStrategy ({supported_spec()}): Keras' own multi-worker fit fails "
        f"there. Hint: {install_hint(tf_version)}, or train with tfdist.fit."
    )
