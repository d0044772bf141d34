"""The Keras fix: Keras 3's own ``model.fit`` / ``evaluate`` / ``predict`` under MultiWorkerMirroredStrategy.

Keras 3's TensorFlow trainer breaks when the strategy spans several workers (keras-team/keras#20585):
``_maybe_symbolic_build`` reduces the first batch with ``strategy.reduce("MEAN", (x, y))`` and
``reduce_per_replica`` reduces scalar logs with ``axis=0``. Only those are replaced, only under a
multi-worker strategy. Releases differ in one table (:mod:`tfdist.keras.adapters`); outside it, a
multi-worker ``fit`` / ``evaluate`` / ``predict`` ends with one :class:`~tfdist.errors.ConfigError` line.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from tfdist import variables
from tfdist.errors import ConfigError
from tfdist.keras import adapters, callbacks, checks, gradients, metrics, shuffle
from tfdist.keras.adapters import KerasAdapter, keras_version
from tfdist.keras.checks import is_multi_worker

#: The Keras range of the adapter table, ``[low, high)`` (every row is trained by devtools/compat.py).
TESTED_KERAS = adapters.supported_range()
TARGET = "keras.src.backend.tensorflow.trainer"
_STATE: dict[str, Any] = {}
#: Called when model.fit builds without any strategy: the worker bootstrap registers its join-check
#: report here (keras/ does not import worker/, which runs above it).
ON_FIT_WITHOUT_STRATEGY: list[Callable[[], None]] = []


def keras_in_tested_range(version: str) -> bool:
    """True when ``version`` (e.g. ``"3.15.1"``) has a row in the adapter table."""
    return adapters.adapter_for(version) is not None


def enabled_by_env(environ: dict[str, str] | os._Environ[str] = os.environ) -> bool:
    """``TFDIST_KERAS_PATCH=0`` (or false/no/off) turns the fix off."""
    return bool(variables.get("TFDIST_KERAS_PATCH", environ))


def is_installed() -> bool:
    """True once the fix has been applied to the imported Keras trainer module."""
    return bool(_STATE.get("installed"))


def current_adapter() -> KerasAdapter | None:
    """The adapter-table row of the installed Keras; None outside the table."""
    version = keras_version()
    if _STATE.get("version") != version:
        _STATE["version"], _STATE["adapter"] = version, adapters.adapter_for(version)
    adapter: KerasAdapter | None = _STATE["adapter"]
    return adapter


def gate() -> bool:
    """Whether the fix may be applied: on (``TFDIST_KERAS_PATCH``) and Keras has a row in the table."""
    return enabled_by_env() and current_adapter() is not None


def refusal(strategy: Any) -> None:
    """Raise the one-line ConfigError for a Keras outside the table (only the chief prints it)."""
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
    """``sys.stderr`` of a non-chief worker, dropping only the writes that carry the chief's line."""

    def __init__(self, stream: Any, line: str) -> None:
        # Its start: a printer may cut a long line (the worker bootstrap keeps 400 characters).
        self._stream, self._line = stream, line[:120]

    def write(self, text: str) -> int:
        return len(text) if self._line in text else int(self._stream.write(text))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def install() -> bool:
    """Apply the fix to Keras (idempotent); True when it is active."""
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
    """``float(model.optimizer.learning_rate)`` under MultiWorkerMirroredStrategy (once): a MirroredVariable
    has no ``__float__``, but its ``__array__`` is this replica's value."""
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
    """Replace the two multi-worker behaviours of Keras' trainer (once; outside the table: the refusal)."""
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
    """A multi-worker epoch iterator that shuffles draws the same order on every worker."""
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


def _report_no_strategy() -> None:
    for hook in ON_FIT_WITHOUT_STRATEGY:  # a launched fit that will not join the job
        hook()


def _refuse_or_report(model: Any, method: str) -> None:
    strategy = getattr(model, "_distribute_strategy", None)
    if strategy is None:
        _report_no_strategy()
    refusal(strategy)


def _check_on_entry(model: Any, method: str) -> None:
    strategy = getattr(model, "_distribute_strategy", None)
    if strategy is None:
        _report_no_strategy()
    elif is_multi_worker(strategy):
        patch_gradients()
        if method != "predict":
            checks.check_fit_inputs(model, None, strategy)


def patch_gradients() -> None:
    """The optimizer part of the fix, where the row needs it (at the first multi-worker fit)."""
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
    """The per-step iterator of an epoch's first step (the last item of what the epoch yields first)."""
    steps = iterator.enumerate_epoch() if epoch_steps == "enumerate_epoch" else iterator
    return next((step[-1] for step in steps), None)


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
    """Reduce a step's output across all replicas of all workers: the scalars (the logs) stacked into one
    float64 vector (integer counters stay exact) and reduced once, other tensors one by one."""
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
