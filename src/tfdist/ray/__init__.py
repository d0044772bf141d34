"""Ray Train with tfdist: ``TensorflowTrainer`` workers that run Keras 3 ``model.fit`` under
MultiWorkerMirroredStrategy (ray-project/ray#47464, keras-team/keras#20585).

Pass ``tensorflow_config=tfdist.ray.TensorflowConfig()`` (Ray's backend, then :func:`setup_worker` on every
worker once ``TF_CONFIG`` is written), or call ``tfdist.strategy()`` in the training function.
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
    """Run on a Ray Train worker after Ray set ``TF_CONFIG``: install the Keras fix; True when active.

    Ray's backend sets ``TF_USE_LEGACY_KERAS=1``; without the ``tf_keras`` package ``tf.keras`` then fails
    to import, so the variable is removed there.
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
