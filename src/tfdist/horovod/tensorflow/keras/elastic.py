"""``horovod.tensorflow.keras.elastic`` (``hvd.elastic`` of the Keras module) on tfdist: ``KerasState`` and
the callbacks that keep ``state.epoch`` and ``state.batch`` and commit during ``model.fit``, as Horovod's
(for the Keras that ``tf.keras`` names in this process)."""

from __future__ import annotations

from typing import Any

from tfdist.horovod.callbacks import _Callback
from tfdist.horovod.elastic import HorovodInternalError, HostsUpdatedInterrupt, ObjectState, State, run
from tfdist.horovod.tensorflow.elastic import TensorFlowKerasState

__all__ = [
    "CommitStateCallback",
    "HorovodInternalError",
    "HostsUpdatedInterrupt",
    "KerasState",
    "ObjectState",
    "State",
    "TensorFlowKerasState",
    "UpdateBatchStateCallback",
    "UpdateEpochStateCallback",
    "run",
]


class KerasState(TensorFlowKerasState):
    """The state of a Keras model and its optimizer, and of the Python objects given as keyword
    arguments (``batch=0, epoch=0``)."""

    def __init__(self, model: Any, optimizer: Any = None, **kwargs: Any) -> None:
        super().__init__(model, optimizer=optimizer, **kwargs)


class CommitStateCallback(_Callback):
    """Commits ``state`` every ``batches_per_commit`` batches and at the end of every epoch."""

    def __init__(self, state: State, batches_per_commit: int = 1) -> None:
        super().__init__()
        self.state = state
        self.batches_per_commit = batches_per_commit
        self.batches_remaining = batches_per_commit

    def on_train_begin(self, logs: Any = None) -> None:
        self.batches_remaining = self.batches_per_commit  # the same count on every rank after a sync

    def on_batch_end(self, batch: int, logs: Any = None) -> None:
        self.batches_remaining -= 1
        if self.batches_remaining == 0:
            self.state.commit()
            self.batches_remaining = self.batches_per_commit

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        self.state.commit()


class UpdateBatchStateCallback(_Callback):
    """Keeps ``state.batch`` at the index of the last batch of the epoch (0 again at its end). With
    ``steps_per_epoch``, it sets ``params["steps"]`` of the first epoch after a reset to the batches left,
    as Horovod's does (Keras reads its own step count, not that one)."""

    def __init__(self, state: State) -> None:
        super().__init__()
        self.state = state
        self.steps_per_epoch: int | None = None

    def on_train_begin(self, logs: Any = None) -> None:
        self.steps_per_epoch = None

    def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
        if self.params.get("steps"):
            if self.steps_per_epoch is None:
                self.steps_per_epoch = self.params.get("steps")
            self.params["steps"] = self.steps_per_epoch - self.state.batch  # type: ignore[attr-defined]

    def on_batch_end(self, batch: int, logs: Any = None) -> None:
        self.state.batch = batch  # type: ignore[attr-defined]

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        self.state.batch = 0  # type: ignore[attr-defined]


class UpdateEpochStateCallback(_Callback):
    """Keeps ``state.epoch`` at the number of epochs done across resets and restarts (Keras counts each
    ``fit`` from 0)."""

    def __init__(self, state: State) -> None:
        super().__init__()
        self.state = state
        self.initial_epoch = state.epoch  # type: ignore[attr-defined]

    def on_train_begin(self, logs: Any = None) -> None:
        self.initial_epoch = self.state.epoch  # type: ignore[attr-defined]

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        # +1: a reset after state.batch went back to 0 must not repeat the epoch just done.
        self.state.epoch = self.initial_epoch + epoch + 1  # type: ignore[attr-defined]
