"""TRAIN CORRECTLY: :func:`fit`, :func:`evaluate`, :func:`predict` over the distributed training loop."""

from __future__ import annotations

from tfdist.train.entry import fit
from tfdist.train.inference import evaluate, predict

__all__ = ["evaluate", "fit", "predict"]
