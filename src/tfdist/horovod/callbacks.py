"""Horovod's Keras callbacks (``hvd.callbacks.*``) for ``model.fit``: Keras 3's, or Keras 2's (tf-keras) in
a process where ``tf.keras`` is Keras 2 (``TF_USE_LEGACY_KERAS=1``): each Keras calls only callbacks
derived from its own ``Callback`` class."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import keras
import numpy as np

from tfdist import variables
from tfdist.horovod import functions, ops, runtime
from tfdist.horovod.gradients import variable_key


def _callback_base() -> type:
    """The ``Callback`` class of the Keras that ``tf.keras`` names in this process."""
    if variables.tf_uses_legacy_keras():
        import tf_keras

        return tf_keras.callbacks.Callback
    return keras.callbacks.Callback


def _schedule_types() -> tuple[type, ...]:
    """Learning-rate schedule classes of every Keras loaded here (a schedule cannot be set to a number)."""
    import sys

    found: list[type] = [keras.optimizers.schedules.LearningRateSchedule]
    tf_keras = sys.modules.get("tf_keras")
    if tf_keras is not None:
        found.append(tf_keras.optimizers.schedules.LearningRateSchedule)
    return tuple(found)


def _optimizer_variables(optimizer: Any) -> list[Any]:
    """An optimizer's variables: a list in Keras 3 and tf-keras' new optimizers, a method in the legacy."""
    found = optimizer.variables
    return list(found() if callable(found) else found)


_Callback: Any = _callback_base()


class BroadcastGlobalVariablesCallback(_Callback):
    """After the first batch, every rank takes ``root_rank``'s model and optimizer variables (the first
    batch creates the optimizer's), so all ranks train the same model from there on."""

    def __init__(self, root_rank: int, device: str = "", local_variables: Any = None) -> None:
        super().__init__()
        del device
        self.root_rank = root_rank
        self.broadcast_done = False
        self._local = {variable_key(v) for v in (local_variables or ())}

    def register_local_var(self, var: Any) -> None:
        """A variable each rank keeps as its own (not broadcast)."""
        self._local.add(variable_key(var))

    def on_batch_end(self, batch: int, logs: Any = None) -> None:
        if self.broadcast_done:
            return
        shared = [v for v in self.model.variables if variable_key(v) not in self._local]
        optimizer = getattr(self.model, "optimizer", None)
        functions.broadcast_variables(
            shared + (_optimizer_variables(optimizer) if optimizer else []), self.root_rank
        )
        self.broadcast_done = True


class MetricAverageCallback(_Callback):
    """At each epoch end, every logged metric becomes its average over all ranks (one all-reduce)."""

    def __init__(self, device: str = "") -> None:
        super().__init__()
        del device

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        if not logs:
            return
        names = sorted(k for k, v in logs.items() if np.ndim(v) == 0 and np.isreal(v))
        values = np.array([float(logs[k]) for k in names], dtype=np.float64)
        (averaged,) = ops.allreduce_arrays([values], ops.Average, 1.0, 1.0)
        for name, value in zip(names, averaged, strict=True):
            logs[name] = float(value)


class LearningRateScheduleCallback(_Callback):
    """Sets the learning rate to ``initial_lr * multiplier(epoch)`` between ``start_epoch`` and
    ``end_epoch``, at each epoch start (``staircase``) or each batch (fractional epochs)."""

    def __init__(
        self,
        initial_lr: float,
        multiplier: float | Callable[[float], float],
        start_epoch: int = 0,
        end_epoch: int | None = None,
        staircase: bool = True,
        momentum_correction: bool = True,
        steps_per_epoch: int | None = None,
    ) -> None:
        super().__init__()
        if initial_lr is None:
            raise ValueError("Parameter `initial_lr` is required")
        self.initial_lr = float(initial_lr)
        self.start_epoch, self.end_epoch, self.staircase = start_epoch, end_epoch, staircase
        self.steps_per_epoch = steps_per_epoch
        self.current_epoch = 0
        if callable(multiplier):
            self.multiplier = multiplier
        else:
            factor = float(multiplier)
            self.multiplier = lambda epoch: factor ** (epoch - start_epoch)
        self.momentum_correction = momentum_correction

    def _steps(self) -> int:
        if self.steps_per_epoch:
            return int(self.steps_per_epoch)
        steps = (self.params or {}).get("steps")
        if not steps:
            raise ValueError(
                "Could not autodetect the number of steps per epoch. Please specify the steps_per_epoch "
                f"parameter to the {type(self).__name__}()."
            )
        return int(steps)

    def _set_lr(self, epoch: float) -> None:
        optimizer = self.model.optimizer
        rate = getattr(optimizer, "_learning_rate", None)
        if rate is None:  # a Keras 2 legacy optimizer keeps it among its hyperparameters
            rate = getattr(optimizer, "_hyper", {}).get("learning_rate")
        if isinstance(rate, _schedule_types()):
            raise ValueError(
                f"{type(self).__name__} sets the learning rate, but the optimizer's learning rate is a "
                "schedule. Hint: give the optimizer a number as its learning rate."
            )
        optimizer.learning_rate = self.initial_lr * self.multiplier(epoch)

    def on_train_begin(self, logs: Any = None) -> None:
        if not self.staircase:
            self.steps_per_epoch = self._steps()
        if self.momentum_correction and getattr(self.model.optimizer, "momentum", None):
            # Keras 3 (and tf-keras' new optimizers) compile an optimizer's momentum into the step as a
            # constant: changing it per batch, as Horovod's correction did on Keras 2's legacy ones, would
            # have no effect.
            warnings.warn(
                "momentum_correction has no effect with these optimizers (their momentum is a constant of "
                "the compiled step); the learning rate is scheduled without it.",
                stacklevel=2,
            )

    def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
        self.current_epoch = epoch

    def on_batch_begin(self, batch: int, logs: Any = None) -> None:
        if self.current_epoch < self.start_epoch or (
            self.end_epoch is not None and self.current_epoch >= self.end_epoch
        ):
            return
        if self.staircase and batch == 0:
            self._set_lr(self.current_epoch)
        elif not self.staircase:
            self._set_lr(self.current_epoch + float(batch) / self._steps())

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        if logs is not None:
            logs["lr"] = float(np.asarray(self.model.optimizer.learning_rate))


class LearningRateWarmupCallback(LearningRateScheduleCallback):
    """Goya et al.'s gradual warm-up: from ``initial_lr / size`` to ``initial_lr`` over ``warmup_epochs``."""

    def __init__(
        self,
        initial_lr: float,
        warmup_epochs: int = 5,
        momentum_correction: bool = True,
        steps_per_epoch: int | None = None,
        verbose: int = 0,
    ) -> None:
        def multiplier(epoch: float) -> float:
            size = runtime.world().size
            epoch += 1.0 / self._steps()
            return 1.0 / size * (epoch * (size - 1) / warmup_epochs + 1)

        super().__init__(
            initial_lr,
            multiplier,
            start_epoch=0,
            end_epoch=warmup_epochs,
            staircase=False,
            momentum_correction=momentum_correction,
            steps_per_epoch=steps_per_epoch,
        )
        self.verbose = verbose

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        super().on_epoch_end(epoch, logs)
        if epoch == (self.end_epoch or 0) - 1 and self.verbose > 0 and runtime.world().rank == 0:
            lr = float(np.asarray(self.model.optimizer.learning_rate))
            print(f"\nEpoch {epoch + 1}: finished gradual learning rate warmup to {lr:g}.")
