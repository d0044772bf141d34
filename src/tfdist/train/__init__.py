"""TRAIN CORRECTLY: :func:`fit`, the distributed training loop."""

from __future__ import annotations

from tfdist.train.loop import fit

__all__ = ["fit"]
