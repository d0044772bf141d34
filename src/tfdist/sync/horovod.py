"""The Horovod synchroniser (``--backend horovod`` with Horovod installed): Horovod's core TensorFlow ops
only (``grouped_allreduce``, ``broadcast``), since ``horovod.tensorflow.keras`` does not average gradients
on Keras 3. Its test runs wherever Horovod is installed (its last release does not build against
TensorFlow 2.21)."""

from __future__ import annotations

from typing import Any

import numpy as np

from tfdist.backends import HOROVOD_INSTALL_HINT as INSTALL_HINT
from tfdist.errors import SetupError
from tfdist.mpi.rank import check_world
from tfdist.sync.base import ProcessLevel, pack_weights, unpack_weights


def import_horovod() -> Any:
    """``horovod.tensorflow``, or a SetupError saying how to get it (or what to use instead)."""
    try:
        import horovod.tensorflow as hvd
    except ImportError as exc:  # also raised by a Horovod built against another TensorFlow
        raise SetupError(f"the horovod backend needs horovod.tensorflow ({exc}). {INSTALL_HINT}") from None
    return hvd


class HorovodSync(ProcessLevel):
    """Sums gradients and metric sums over all Horovod ranks; broadcasts initial weights from rank 0."""

    name = "horovod"

    def __init__(self) -> None:
        hvd = import_horovod()
        hvd.init()
        self.hvd = hvd
        self.rank, self.size = int(hvd.rank()), int(hvd.size())
        check_world(self.size)

    def graph_allreduce(self, parts: list[Any], keep: int = 0, label: str | None = None) -> list[Any]:
        """Sum of each tensor over all ranks, in one fused Horovod operation (``keep``, ``label``: unused,
        the results are fresh tensors and Horovod names its own stalls)."""
        import tensorflow as tf

        del keep, label
        parts = [tf.cast(p, tf.float32) for p in parts]
        return list(self.hvd.grouped_allreduce(parts, op=self.hvd.Sum))

    def allgather(self, array: np.ndarray, label: str = "") -> np.ndarray:
        """Every rank's array concatenated along the first axis, in rank order (uneven lengths allowed)."""
        import tensorflow as tf

        return np.asarray(self.hvd.allgather(tf.constant(array), name="tfdist_allgather"))

    def barrier(self) -> None:
        """Return once every rank got here."""
        import tensorflow as tf

        self.hvd.allreduce(tf.zeros([1]), op=self.hvd.Sum, name="tfdist_barrier")

    def broadcast_weights(self, model: Any) -> None:
        """Give every rank rank 0's initial weights (one packed broadcast)."""
        import tensorflow as tf

        weights = model.get_weights()
        if not weights:
            return
        flat = self.hvd.broadcast(
            tf.constant(pack_weights(weights)), root_rank=0, name="tfdist_initial_weights"
        )
        model.set_weights(unpack_weights(np.asarray(flat), weights))
