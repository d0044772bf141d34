"""Custom Keras layers of the named workloads (imported only when such a model is built)."""

from __future__ import annotations

from typing import Any

import keras


@keras.saving.register_keras_serializable(package="tfdist")
class TableShift(keras.layers.Layer):
    """Adds the mean of a trainable table of ``size`` floats to its input: a dense gradient of that size."""

    def __init__(self, size: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.size = size

    def build(self, input_shape: Any) -> None:
        """Create the table (zeros: the model starts as a plain linear classifier)."""
        self.table = self.add_weight(shape=(self.size,), initializer="zeros", name="table")

    def call(self, x: Any) -> Any:
        """``x + mean(table)``."""
        return x + keras.ops.mean(self.table)

    def get_config(self) -> dict[str, Any]:
        """Serialisable config (for saving the model)."""
        return {**super().get_config(), "size": self.size}
