"""TRAIN CORRECTLY: :func:`fit`, :func:`evaluate`, :func:`predict` over the distributed training loop."""

from __future__ import annotations

from tfdist.train.inference import evaluate, predict
from tfdist.train.loop import fit

__all__ = ["evaluate", "fit", "predict"]
