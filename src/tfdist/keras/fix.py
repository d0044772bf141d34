"""The Keras fix: Keras 3's own ``model.fit`` / ``evaluate`` / ``predict`` under MultiWorkerMirroredStrategy.

Keras 3's TensorFlow trainer (``keras/src/backend/tensorflow/trainer.py``) breaks in two places when the
strategy spans several workers (keras-team/keras#20585, open upstream):

- ``TensorFlowTrainer._maybe_symbolic_build`` (Keras 3.5 and later) reduces the first distributed batch
  with ``strategy.reduce("MEAN", (x, y))``; a collective strategy cannot reduce that nested structure
  ("Attempt to convert a value (PerReplica:{...}) with an unsupported type");
- ``reduce_per_replica`` reduces the scalar logs of every step with ``axis=0``
  ("Invalid reduction dimension 0 for input with 0 dimensions") and calls ``strategy.reduce("SUM", v)``
  without the axis it requires.

Only those two behaviours are replaced, and only while the strategy is a multi-worker collective one;
every other strategy goes through Keras' own code untouched. The replacement builds the model from the
first local replica's batch (only shapes and dtypes matter there) and reduces all scalar logs of a step
in ONE packed all-reduce (each extra collective costs ~1.4 ms on loopback).

What differs between Keras releases is read from ONE table (:mod:`tfdist.keras.adapters`). A Keras outside
the table is left as it is, except that ``fit`` / ``evaluate`` / ``predict`` under a multi-worker strategy
end with one :class:`~tfdist.errors.ConfigError` line naming the Keras to install (exit code 2 in a
launched worker): Keras' own code would fail there with a long traceback.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from tfdist import variables
from tfdist.errors import ConfigError
from tfdist.keras import adapters, callbacks, checks, gradients, metrics, shuffle
from tfdist.keras.adapters import KerasAdapter
from tfdist.keras.checks import is_multi_worker

#: The Keras range of the adapter table, ``[low, high)`` (every row is trained by devtools/compat.py).
TESTED_KERAS = adapters.supported_range()
TARGET = "keras.src.backend.tensorflow.trainer"
_STATE: dict[str, Any] = {}
#: Called when model.fit builds without any strategy: the worker bootstrap registers its join-check
#: report here (keras/ does not import worker/, which runs above it).
ON_FIT_WITHOUT_STRATEGY: list[Callable[[], None]] = []


def keras_in_tested_range(version: str) -> bool:
    """True when ``version`` (e.g. ``"3.15.1"``) has a row in the adapter table.

    Input/Output: ``"3.15.1"`` -> True; ``"3.3.3"`` -> True; ``"3.16.0"`` -> False; ``"2.15.0"`` -> False.
    """
    return adapters.adapter_for(version) is not None


def enabled_by_env(environ: dict[str, str] | os._Environ[str] = os.environ) -> bool:
    """``TFDIST_KERAS_PATCH=0`` (or false/no/off) turns the fix off."""
    return bool(variables.get("TFDIST_KERAS_PATCH", environ))


def is_installed() -> bool:
    """True once the fix has been applied to the imported Keras trainer module."""
    return bool(_STATE.get("installed"))


def keras_version() -> str:
    """The Keras this Python imports (``keras``, ``keras-nightly`` or a build of its own), without
    importing it (Keras may be half-imported here); ``"0"`` when there is none."""
    from tfdist.installed import find

    return find("keras").version or "0"


def current_adapter() -> KerasAdapter | None:
    """The adapter-table row of the installed Keras; None outside the table."""
    version = keras_version()
    if _STATE.get("version") != version:
        _STATE["version"], _STATE["adapter"] = version, adapters.adapter_for(version)
    adapter: KerasAdapter | None = _STATE["adapter"]
    return adapter


def gate() -> bool:
    """Whether the fix may be applied: on (``TFDIST_KERAS_PATCH``) and Keras has a row in the table.

    Silent: a Keras outside the table is refused only where it matters, by :func:`refusal` (a
    multi-worker ``fit`` / ``evaluate`` / ``predict``).
    """
    return enabled_by_env() and current_adapter() is not None


def refusal(strategy: Any) -> None:
    """Raise the one-line ConfigError for a Keras outside the table under a multi-worker strategy.

    Every worker stops (one left in Keras' own fit fails there with a long traceback), but the line is the
    job's, not each worker's: the chief prints it; the others raise the same error, which the worker
    bootstrap records for the launcher's report (whichever worker fails first), without printing it.
    """
    if strategy is None or not is_multi_worker(strategy):
        return
    import sys

    keras = sys.modules.get("keras")
    where = os.path.dirname(getattr(keras, "__file__", "") or "") or "the Python path"
    tf = sys.modules.get("tensorflow")
    message = adapters.unsupported_message(keras_version(), where, getattr(tf, "__version__", None))
    chief, _ = checks.worker_identity(strategy)
    if not chief and not isinstance(sys.stderr, _WithoutLine):
        sys.stderr = _WithoutLine(sys.stderr, message)
    raise ConfigError(message)


class _WithoutLine:
    """``sys.stderr`` of a non-chief worker, without the one line the chief prints for the whole job.

    Only writes that carry that line are dropped: anything else the process prints still shows, and a
    script that catches the error and goes on keeps its stderr.
    """

    def __init__(self, stream: Any, line: str) -> None:
        # Its start: a printer may cut a long line (the worker bootstrap keeps 400 characters).
        self._stream, self._line = stream, line[:120]

    def write(self, text: str) -> int:
        return len(text) if self._line in text else int(self._stream.write(text))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def install() -> bool:
    """Apply the fix to Keras (idempotent); True when it is active. Used by ``tfdist.strategy()``.

    Launched workers get it without importing tfdist: their bootstrap applies :func:`patch_trainer` and
    :func:`tfdist.keras.callbacks.patch_callback_list` as Keras loads those modules.
    """
    if not enabled_by_env():
        return False
    import importlib

    patch_trainer(importlib.import_module(TARGET))  # outside the table: the refusal only
    if not gate():
        return False
    callbacks.patch_callback_list(importlib.import_module(callbacks.TARGET))
    patch_variable_numbers(importlib.import_module(VARIABLES))
    patch_metrics(importlib.import_module(metrics.TARGET))
    return is_installed()


def patch_metrics(module: Any) -> None:
    """Metric state summed over the workers, for the rows whose Keras keeps it per worker."""
    adapter = current_adapter()
    if adapter is not None and not adapter.metrics_on_read:
        metrics.patch_metric_variables(module)


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

    adapter = current_adapter()
    cls = getattr(module, adapter.variable_class if adapter else "Variable")
    if getattr(cls, "_tfdist_numbers", False):
        return
    # Keras before 3.5 has neither: float() of a variable then fails in one process too.
    original_float, original_int = getattr(cls, "__float__", None), getattr(cls, "__int__", None)

    def __float__(self: Any) -> float:
        return float(np.asarray(self))

    def __int__(self: Any) -> int:
        return int(np.asarray(self))

    __float__.__wrapped__ = original_float  # type: ignore[attr-defined]
    __int__.__wrapped__ = original_int  # type: ignore[attr-defined]
    cls.__float__, cls.__int__ = __float__, __int__
    cls._tfdist_numbers = True


#: The TensorFlowTrainer entry points wrapped where Keras has no build hook (before 3.5) or no row.
ENTRY_POINTS = ("fit", "evaluate", "predict")


def patch_trainer(trainer: Any) -> None:
    """Replace the two multi-worker behaviours of Keras' TensorFlow trainer module (once).

    Outside the adapter table only the refusal is installed (:func:`refusal`); with the fix off
    (``TFDIST_KERAS_PATCH=0``) nothing.
    """
    adapter = current_adapter()
    cls = _trainer_class(trainer, adapter)
    if cls is None or not enabled_by_env() or _STATE.get("patched") or getattr(cls, "_tfdist_patched", False):
        return
    _STATE["patched"] = cls._tfdist_patched = True
    if adapter is None:
        _wrap_entry_points(cls, _refuse_or_report)
        return
    if adapter.symbolic_build:
        _replace_symbolic_build(cls, adapter)
    else:  # the model is built while the first step is traced: check the inputs on entry
        _wrap_entry_points(cls, _check_on_entry)
    original_reduce = trainer.reduce_per_replica

    def reduce_per_replica(values: Any, strategy: Any, reduction: str) -> Any:
        if reduction == "concat" or not is_multi_worker(strategy):
            return original_reduce(values, strategy, reduction)
        return reduce_packed(values, strategy, "SUM" if reduction == "sum" else "MEAN")

    reduce_per_replica.__wrapped__ = original_reduce  # type: ignore[attr-defined]
    trainer.reduce_per_replica = reduce_per_replica
    _agree_shuffles(trainer.TFEpochIterator)
    _STATE["installed"] = True


def _trainer_class(trainer: Any, adapter: KerasAdapter | None) -> Any:
    """The trainer class the row names; outside the table, any class of the module with ``fit``."""
    if adapter is not None:
        return getattr(trainer, adapter.trainer_class, None)
    classes = [v for v in vars(trainer).values() if isinstance(v, type) and v.__module__ == trainer.__name__]
    return next((c for c in classes if "fit" in vars(c)), None)


def _agree_shuffles(cls: Any) -> None:
    """A multi-worker epoch iterator that shuffles draws the same order on every worker
    (:mod:`tfdist.keras.shuffle`)."""
    original = cls.__init__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        strategy = kwargs.get("distribute_strategy", args[0] if args else None)
        if not kwargs.get("shuffle") or strategy is None or not is_multi_worker(strategy):
            original(self, *args, **kwargs)
            return
        with shuffle.agreed_shuffles() as agreed:
            original(self, *args, **kwargs)
        if agreed:
            shuffle.agree_seed(strategy)

    __init__.__wrapped__ = original  # type: ignore[attr-defined]
    cls.__init__ = __init__


def _strategy_of(model: Any) -> Any:
    return getattr(model, "_distribute_strategy", None)


def _report_no_strategy() -> None:
    for hook in ON_FIT_WITHOUT_STRATEGY:  # a launched fit that will not join the job
        hook()


def _refuse_or_report(model: Any, method: str) -> None:
    strategy = _strategy_of(model)
    if strategy is None:
        _report_no_strategy()
    refusal(strategy)


def _check_on_entry(model: Any, method: str) -> None:
    strategy = _strategy_of(model)
    if strategy is None:
        _report_no_strategy()
    elif is_multi_worker(strategy):
        patch_gradients()
        if method != "predict":
            checks.check_fit_inputs(model, None, strategy)


def patch_gradients() -> None:
    """The optimizer part of the fix, for the releases whose row needs it (at the first multi-worker fit:
    Keras is fully imported by then)."""
    import importlib

    adapter = current_adapter()
    if adapter is not None and adapter.gradients != "scaled":
        gradients.patch_optimizer(importlib.import_module(gradients.TARGET), adapter.gradients)


def _wrap_entry_points(cls: Any, before: Callable[[Any, str], None]) -> None:
    """Run ``before(model, name)`` first in each of :data:`ENTRY_POINTS`."""
    for name in ENTRY_POINTS:
        original = getattr(cls, name)

        def entry(
            self: Any, *args: Any, __original: Any = original, __name: str = name, **kwargs: Any
        ) -> Any:
            before(self, __name)
            return __original(self, *args, **kwargs)

        entry.__wrapped__ = original  # type: ignore[attr-defined]
        entry.__name__ = entry.__qualname__ = name
        setattr(cls, name, entry)


def first_step_iterator(iterator: Any, epoch_steps: str) -> Any:
    """The per-step iterator of an epoch's first step, walked as the adapter's Keras walks an epoch."""
    if epoch_steps == "enumerate_epoch":
        for _, it in iterator.enumerate_epoch():
            return it
    elif epoch_steps == "pairs":
        for _, it in iterator:
            return it
    else:
        for _, _, it in iterator:
            return it
    return None


def _replace_symbolic_build(cls: Any, adapter: KerasAdapter) -> None:
    original_build = cls._maybe_symbolic_build

    def _maybe_symbolic_build(self: Any, iterator: Any = None, data_batch: Any = None) -> Any:
        strategy = self._distribute_strategy
        if strategy is None:
            _report_no_strategy()
        if strategy is None or not is_multi_worker(strategy):
            return original_build(self, iterator=iterator, data_batch=data_batch)
        patch_gradients()
        checks.check_fit_inputs(self, iterator, strategy)
        if iterator is not None:
            it = first_step_iterator(iterator, adapter.epoch_steps)
            if it is not None:
                data_batch = first_local_batch(strategy, next(it))
        with strategy.scope():
            self._symbolic_build(data_batch=data_batch)

    _maybe_symbolic_build.__wrapped__ = original_build  # type: ignore[attr-defined]
    cls._maybe_symbolic_build = _maybe_symbolic_build


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
