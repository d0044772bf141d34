"""Any Keras metric with its exact global value, through the metric's own state variables: each step's
additive state (``stateless_update_state`` from zeros) rides in the loss sums' vector, summed by the one
all-reduce of each sync point; the logged value is ``stateless_result`` of the sum."""

from __future__ import annotations

from typing import Any

import numpy as np

from tfdist.errors import ConfigError


class MetricSet:
    """The compiled metrics (``metrics`` and ``weighted_metrics``) of a model as a flat state vector."""

    def __init__(self, model: Any, strategy: Any, x_sample: Any, y_sample: Any) -> None:
        import tensorflow as tf

        self.compiled: Any = getattr(model, "_compile_metrics", None)
        if self.compiled is not None and not self.compiled.built:
            with strategy.scope():
                self.compiled.build(y_sample, model(x_sample, training=False))
        variables = list(self.compiled.variables) if self.compiled is not None else []
        for v in variables:
            if str(getattr(v, "aggregation", "sum")) != "sum":
                raise ConfigError(
                    f"metric variable {v.path!r} aggregates by {v.aggregation!r}; tfdist.fit sums metric "
                    "state over replicas and workers, so it needs additive (aggregation='sum') metric state. "
                    "Hint: drop that metric from compile(), or compute it after training."
                )
        self.shapes = [tuple(int(d) for d in v.shape) for v in variables]
        self.dtypes = [v.dtype for v in variables]
        self.size = int(sum(int(np.prod(s)) for s in self.shapes))
        self._zeros = [tf.zeros(s, d) for s, d in zip(self.shapes, self.dtypes, strict=True)]
        self.names = list(self._result(np.zeros(self.size)).keys())

    def sums(self, y: Any, pred: Any, w: Any, keep: Any) -> Any:
        """This replica's contribution to the metric state for one batch, as a float32 vector; ``keep``: the
        real rows (padding is left out, while rows a user weighted 0 count as they do in Keras)."""
        import tensorflow as tf

        if not self.size or self.compiled is None:
            return tf.zeros([0], tf.float32)
        y, pred = (tf.nest.map_structure(lambda t: tf.boolean_mask(t, keep), s) for s in (y, pred))
        state = self.compiled.stateless_update_state(
            self._zeros, y, pred, sample_weight=tf.boolean_mask(w, keep)
        )
        return tf.concat([tf.reshape(tf.cast(v, tf.float32), [-1]) for v in state], 0)

    def _result(self, flat: np.ndarray) -> dict[str, float]:
        if self.compiled is None:
            return {}
        import tensorflow as tf

        values, at = [], 0
        for shape, dtype in zip(self.shapes, self.dtypes, strict=True):
            n = int(np.prod(shape))
            values.append(tf.cast(np.reshape(flat[at : at + n], shape), dtype))
            at += n
        out = self.compiled.stateless_result(values)
        return {name: float(np.asarray(value)) for name, value in out.items()}

    def logs(self, totals: np.ndarray, prefix: str = "") -> dict[str, float]:
        """``{loss, metric…}`` from a totals vector ``[loss sum, state…, examples]``."""
        count = max(float(totals[-1]), 1.0)
        metrics = self._result(np.asarray(totals[1 : 1 + self.size]))
        return {f"{prefix}loss": float(totals[0] / count), **{f"{prefix}{k}": v for k, v in metrics.items()}}

    @property
    def width(self) -> int:
        """Length of a totals vector: loss sum, metric state, example count."""
        return self.size + 2
