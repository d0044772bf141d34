"""``horovod.tensorflow.elastic`` (``hvd.elastic``) on tfdist: the state of a Keras model and its optimizer,
or of TensorFlow variables, with Python objects beside them, committed, restored and synced as Horovod's
(eagerly: TensorFlow 1 sessions are not supported). How commits outlive a restart:
:mod:`tfdist.horovod.elastic`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tfdist.horovod import functions, objects, runtime
from tfdist.horovod.elastic import HorovodInternalError, HostsUpdatedInterrupt, ObjectState, State, run
from tfdist.horovod.optimizer import keras2_names

__all__ = [
    "HorovodInternalError",
    "HostsUpdatedInterrupt",
    "ObjectState",
    "State",
    "TensorFlowKerasState",
    "TensorFlowState",
    "run",
]


def _rank() -> int:
    return runtime.world().rank


def _check_eager() -> None:
    import tensorflow as tf

    if not tf.executing_eagerly():
        raise NotImplementedError(
            "hvd.elastic's state classes run eagerly in tfdist's Horovod API (TensorFlow 2), not in a "
            "TensorFlow 1 graph."
        )


def _values(variables: Sequence[Any]) -> list[np.ndarray]:
    """Host copies of the variables' values (a commit must not change with the variables)."""
    return [np.array(v.numpy()) for v in variables]


def _assign(variables: Sequence[Any], values: Sequence[Any]) -> None:
    for var, value in zip(variables, values, strict=False):  # Horovod's zip: the optimizer may grow
        var.assign(value)


def _assign_exactly(variables: Sequence[Any], values: Sequence[Any], what: str) -> None:
    """Assign a commit from disk, which must fit these variables one for one."""
    shapes = [tuple(v.shape) for v in variables]
    if shapes != [np.shape(x) for x in values]:
        raise ValueError(
            f"the committed state holds {len(values)} {what} variable(s) of other shapes than the "
            f"{len(variables)} here"
        )
    _assign(variables, values)


def _optimizer_variables(optimizer: Any) -> list[Any]:
    from tfdist.horovod.callbacks import _optimizer_variables as variables_of  # Keras: not at hvd's import

    return [] if optimizer is None else variables_of(optimizer)


class TensorFlowKerasState(ObjectState):
    """The state of a Keras model and its optimizer (model and optimizer variables), and of the Python
    objects given as keyword arguments.

    Args:
        model: a built Keras model.
        optimizer: its optimizer (default: the one it was compiled with).
        backend: TensorFlow 1's Keras backend in Horovod; unused (eager only).
        kwargs: objects kept as attributes (``epoch=0``, ``batch=0``).
    """

    def __init__(self, model: Any, optimizer: Any = None, backend: Any = None, **kwargs: Any) -> None:
        self.model = model
        if not getattr(model, "built", True):
            raise ValueError("Model must be built first. Run `model.build(input_shape)`.")
        self.optimizer = optimizer or model.optimizer
        self.backend = backend
        _check_eager()
        keras2_names()  # the examples' reset callbacks set optimizer.lr
        self._save_model()
        super().__init__(bcast_object=objects.broadcast_object, get_rank=_rank, **kwargs)

    def save(self) -> None:
        self._save_model()
        super().save()

    def restore(self) -> None:
        _assign(self.model.variables, self._saved_model_state)
        _assign(_optimizer_variables(self.optimizer), self._saved_optimizer_state)
        super().restore()

    def sync(self) -> None:
        functions.broadcast_variables(
            [*self.model.variables, *_optimizer_variables(self.optimizer)], root_rank=0
        )
        self._save_model()
        super().sync()

    def _save_model(self) -> None:
        self._saved_model_state = _values(self.model.variables)
        self._saved_optimizer_state = _values(_optimizer_variables(self.optimizer))

    def _committed(self) -> dict[str, Any]:
        return {
            **super()._committed(),
            "model": self._saved_model_state,
            "optimizer": self._saved_optimizer_state,
        }

    def _load(self, committed: dict[str, Any]) -> None:
        optimizer = self.optimizer
        if not getattr(optimizer, "built", True) and hasattr(optimizer, "build"):
            optimizer.build(self.model.trainable_variables)  # its slots, as the committed run had them
        _assign_exactly(self.model.variables, committed["model"], "model")
        _assign_exactly(_optimizer_variables(optimizer), committed["optimizer"], "optimizer")
        self._save_model()
        super()._load(committed)


class TensorFlowState(ObjectState):
    """The state of TensorFlow variables, and of the Python objects given as keyword arguments.

    Args:
        variables: the ``tf.Variable`` objects.
        session: TensorFlow 1's session in Horovod; unused (eager only).
        kwargs: objects kept as attributes.
    """

    def __init__(self, variables: Sequence[Any] | None = None, session: Any = None, **kwargs: Any) -> None:
        _check_eager()
        self.variables = list(variables or ())
        self.session = session
        self._values = _values(self.variables)
        super().__init__(bcast_object=objects.broadcast_object, get_rank=_rank, **kwargs)

    def save(self) -> None:
        self._values = _values(self.variables)
        super().save()

    def restore(self) -> None:
        _assign(self.variables, self._values)
        super().restore()

    def sync(self) -> None:
        functions.broadcast_variables(self.variables, root_rank=0)
        self._values = _values(self.variables)
        super().sync()

    def _committed(self) -> dict[str, Any]:
        return {**super()._committed(), "variables": self._values}

    def _load(self, committed: dict[str, Any]) -> None:
        _assign_exactly(self.variables, committed["variables"], "TensorFlow")
        self._values = _values(self.variables)
        super()._load(committed)
