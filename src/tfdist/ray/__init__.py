"""Ray Train with tfdist: ``TensorflowTrainer`` workers that run Keras 3 ``model.fit`` under
MultiWorkerMirroredStrategy.

Ray's ``TensorflowTrainer`` writes ``TF_CONFIG`` on each worker and leaves the rest to the training
function, where Keras 3's ``model.fit`` then fails under MultiWorkerMirroredStrategy (ray-project/ray#47464,
keras-team/keras#20585). Two ways to get tfdist's Keras fix there:

- ``tensorflow_config=tfdist.ray.TensorflowConfig()``: Ray's own backend plus one step on every worker
  once ``TF_CONFIG`` is written (:func:`setup_worker`), so an unchanged training function that builds
  ``tf.distribute.MultiWorkerMirroredStrategy()`` works. A ``TensorflowConfig`` subclass is the hook Ray
  offers for what runs on each worker before training; a ``runtime_env`` could not undo the variable Ray's
  backend sets later (below).
- or one line in the training function: ``strategy = tfdist.strategy()`` (it installs the fix).
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from typing import Any

from ray.train.tensorflow.config import TensorflowConfig as _RayTensorflowConfig
from ray.train.tensorflow.config import _TensorflowBackend

__all__ = ["TensorflowConfig", "setup_worker"]


def setup_worker() -> bool:
    """Run on a Ray Train worker after Ray set ``TF_CONFIG``: keep Keras 3 and install the Keras fix.

    Ray's backend also sets ``TF_USE_LEGACY_KERAS=1``, which makes ``tf.keras`` load Keras 2 from the
    ``tf_keras`` package; where that package is not installed, ``tf.keras`` then fails to import at all, so
    the variable is removed there (``import keras`` is unaffected either way). Returns True when the fix is
    active.
    """
    if os.environ.get("TF_USE_LEGACY_KERAS") == "1" and importlib.util.find_spec("tf_keras") is None:
        del os.environ["TF_USE_LEGACY_KERAS"]
    from tfdist.keras import fix

    return fix.install()


class _Backend(_TensorflowBackend):
    """Ray's TensorFlow backend, then :func:`setup_worker` on every worker."""

    def on_start(self, worker_group: Any, backend_config: Any) -> None:
        super().on_start(worker_group, backend_config)
        worker_group.execute(setup_worker)


@dataclass
class TensorflowConfig(_RayTensorflowConfig):
    """Ray Train's ``TensorflowConfig`` whose workers get tfdist's Keras fix: pass it as
    ``TensorflowTrainer(..., tensorflow_config=tfdist.ray.TensorflowConfig())``."""

    @property
    def backend_cls(self) -> type[Any]:
        """The backend Ray instantiates: Ray's own plus :func:`setup_worker`."""
        return _Backend
