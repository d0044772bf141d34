"""The Keras fix: Keras 3's own ``model.fit`` / ``evaluate`` / ``predict`` under MultiWorkerMirroredStrategy.

Keras 3's TensorFlow trainer (``keras/src/backend/tensorflow/trainer.py``) breaks in two places when the
strategy spans several workers (keras-team/keras#20585, open upstream):

- ``TensorFlowTrainer._maybe_symbolic_build`` reduces the first distributed batch with
  ``strategy.reduce("MEAN", (x, y))``; a collective strategy cannot reduce that nested structure
  ("Attempt to convert a value (PerReplica:{...}) with an unsupported type");
- ``reduce_per_replica`` reduces the scalar logs of every step with ``axis=0``
  ("Invalid reduction dimension 0 for input with 0 dimensions") and calls ``strategy.reduce("SUM", v)``
  without the axis it requires.

Only those two behaviours are replaced, and only while the strategy is a multi-worker collective one;
every other strategy goes through Keras' own code untouched. The replacement builds the model from the
first local replica's batch (only shapes and dtypes matter there) and reduces all scalar logs of a step
in ONE packed all-reduce (each extra collective costs ~1.4 ms on loopback).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from typing import Any

from tfdist import variables
from tfdist.keras import callbacks, checks
from tfdist.keras.checks import is_multi_worker

#: Keras releases whose trainer was read and tested with this fix (keep in step with pyproject.toml).
TESTED_KERAS = ((3, 15), (3, 16))  # [lower, upper)
TARGET = "keras.src.backend.tensorflow.trainer"
_STATE: dict[str, Any] = {}
#: Called when model.fit builds without any strategy: the worker bootstrap registers its join-check
#: report here (keras/ does not import worker/, which runs above it).
ON_FIT_WITHOUT_STRATEGY: list[Callable[[], None]] = []


def _version_tuple(text: str) -> tuple[int, int]:
    parts = [int("".join(ch for ch in p if ch.isdigit()) or 0) for p in text.split(".")[:2]]
    padded = [*parts, 0, 0]
    return padded[0], padded[1]


def keras_in_tested_range(version: str) -> bool:
    """True when ``version`` (e.g. ``"3.15.1"``) lies in :data:`TESTED_KERAS`.

    Input/Output: ``"3.15.1"`` -> True; ``"3.16.0"`` -> False; ``"2.15.0"`` -> False.
    """
    low, high = TESTED_KERAS
    return low <= _version_tuple(version) < high


def enabled_by_env(environ: dict[str, str] | os._Environ[str] = os.environ) -> bool:
    """``TFDIST_KERAS_PATCH=0`` (or false/no/off) turns the fix off."""
    return bool(variables.get("TFDIST_KERAS_PATCH", environ))


def is_installed() -> bool:
    """True once the fix has been applied to the imported Keras trainer module."""
    return bool(_STATE.get("installed"))


def keras_version() -> str:
    """The installed Keras version, read from package metadata (Keras may be half-imported here)."""
    from importlib import metadata

    try:
        return metadata.version("keras")
    except metadata.PackageNotFoundError:
        return "0"


def gate() -> bool:
    """Whether the fix may be applied: on (``TFDIST_KERAS_PATCH``) and Keras in the tested range.

    Outside the range it warns once, naming the version, and the fix stays off.
    """
    if not enabled_by_env():
        return False
    version = keras_version()
    if keras_in_tested_range(version):
        return True
    if not _STATE.get("warned"):
        _STATE["warned"] = True
        low, high = TESTED_KERAS
        wanted = f">={low[0]}.{low[1]},<{high[0]}.{high[1]}"
        warnings.warn(
            f"tfdist: Keras {version} is outside the range the model.fit fix was tested with ({wanted}); "
            "Keras is left unpatched, so model.fit under MultiWorkerMirroredStrategy may fail. "
            f"Hint: pip install 'keras{wanted}', or train with tfdist.fit.",
            RuntimeWarning,
            stacklevel=3,
        )
    return False


def install() -> bool:
    """Apply the fix to Keras (idempotent); True when it is active. Used by ``tfdist.strategy()``.

    Launched workers get it without importing tfdist: their bootstrap applies :func:`patch_trainer` and
    :func:`tfdist.keras.callbacks.patch_callback_list` as Keras loads those modules.
    """
    if not gate():
        return False
    import importlib

    patch_trainer(importlib.import_module(TARGET))
    callbacks.patch_callback_list(importlib.import_module(callbacks.TARGET))
    patch_variable_numbers(importlib.import_module(VARIABLES))
    return is_installed()


#: The Keras module whose Variable learns ``float()`` / ``int()`` of a distributed value.
VARIABLES = "keras.src.backend.common.variables"


def patch_variable_numbers(module: Any) -> None:
    """``float(model.optimizer.learning_rate)`` under MultiWorkerMirroredStrategy (once).

    Keras' ``Variable.__float__`` is ``float(self.value)``, and under a mirrored strategy ``self.value`` is
    a MirroredVariable, which has no ``__float__`` ("float() argument must be ... not
    'MirroredVariable'"): every per-step schedule or logger that reads the rate fails there. Reading it
    through NumPy (``__array__``, which a MirroredVariable has: this replica's value) works for every value.
    """
    import numpy as np

    cls = module.Variable
    if getattr(cls.__float__, "__wrapped__", None):
        return
    original_float, original_int = cls.__float__, cls.__int__

    def __float__(self: Any) -> float:
        return float(np.asarray(self))

    def __int__(self: Any) -> int:
        return int(np.asarray(self))

    __float__.__wrapped__ = original_float  # type: ignore[attr-defined]
    __int__.__wrapped__ = original_int  # type: ignore[attr-defined]
    cls.__float__, cls.__int__ = __float__, __int__


def patch_trainer(trainer: Any) -> None:
    """Replace the two multi-worker behaviours of Keras' TensorFlow trainer module (once)."""
    if _STATE.get("installed") or getattr(trainer.reduce_per_replica, "__wrapped__", None) or not gate():
        return
    cls = trainer.TensorFlowTrainer
    original_build = cls._maybe_symbolic_build
    original_reduce = trainer.reduce_per_replica

    def _maybe_symbolic_build(self: Any, iterator: Any = None, data_batch: Any = None) -> Any:
        strategy = self._distribute_strategy
        if strategy is None:
            for hook in ON_FIT_WITHOUT_STRATEGY:  # a launched fit that will not join the job
                hook()
        if strategy is None or not is_multi_worker(strategy):
            return original_build(self, iterator=iterator, data_batch=data_batch)
        checks.check_fit_inputs(self, iterator, strategy)
        if iterator is not None:
            for _, _, it in iterator:
                data_batch = first_local_batch(strategy, next(it))
                break
        with strategy.scope():
            self._symbolic_build(data_batch=data_batch)

    def reduce_per_replica(values: Any, strategy: Any, reduction: str) -> Any:
        if reduction == "concat" or not is_multi_worker(strategy):
            return original_reduce(values, strategy, reduction)
        return reduce_packed(values, strategy, "SUM" if reduction == "sum" else "MEAN")

    _maybe_symbolic_build.__wrapped__ = original_build  # type: ignore[attr-defined]
    reduce_per_replica.__wrapped__ = original_reduce  # type: ignore[attr-defined]
    cls._maybe_symbolic_build = _maybe_symbolic_build
    trainer.reduce_per_replica = reduce_per_replica
    _STATE["installed"] = True


def _first_local(strategy: Any, value: Any) -> Any:
    """The first local replica's value of a distributed value; a plain tensor as it is."""
    import tensorflow as tf

    if isinstance(value, tf.distribute.DistributedValues):
        return strategy.experimental_local_results(value)[0]
    return value


def first_local_batch(strategy: Any, batch: Any) -> Any:
    """The first local replica's part of a distributed batch: enough to build the model symbolically."""
    from keras import tree

    return tree.map_structure(lambda value: _first_local(strategy, value), batch)


def reduce_packed(values: Any, strategy: Any, op: str) -> Any:
    """Reduce every tensor of a step's output across all replicas of all workers in one all-reduce.

    Scalars (the metric and loss logs) are stacked into one float64 vector per replica — float64 so integer
    counters survive exactly — reduced once, then split and cast back. Non-scalar leaves, rare in logs,
    are reduced one by one. Same result as MirroredStrategy's reduction on one worker.
    """
    import tensorflow as tf
    from keras import tree

    flat = tree.flatten(values)

    def is_value(v: Any) -> bool:
        return isinstance(v, (tf.Tensor, tf.Variable, tf.distribute.DistributedValues))

    local: list[Any] = [_first_local(strategy, v) if is_value(v) else None for v in flat]
    scalars = [i for i, v in enumerate(local) if v is not None and v.shape.rank == 0]
    others = [i for i, v in enumerate(local) if v is not None and v.shape.rank != 0]
    out = list(flat)
    if scalars:
        dtypes = [local[i].dtype for i in scalars]

        def pack(*xs: Any) -> Any:
            return tf.stack([tf.cast(x, tf.float64) for x in xs])

        packed = strategy.run(pack, args=tuple(flat[i] for i in scalars))
        reduced = strategy.reduce(op, packed, axis=None)
        for k, (i, dtype) in enumerate(zip(scalars, dtypes, strict=True)):
            out[i] = tf.cast(reduced[k], dtype)
    for i in others:
        out[i] = strategy.reduce(op, flat[i], axis=None)
    return tree.pack_sequence_as(values, out)
