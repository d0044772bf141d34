"""The Keras fix: unmodified ``model.fit`` / ``evaluate`` / ``predict`` under MultiWorkerMirroredStrategy."""

from __future__ import annotations

from tfdist.keras.fix import TESTED_KERAS, install, is_installed, is_multi_worker, keras_in_tested_range

__all__ = ["TESTED_KERAS", "install", "is_installed", "is_multi_worker", "keras_in_tested_range"]
