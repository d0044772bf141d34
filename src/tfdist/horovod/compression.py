"""Horovod's gradient compression: ``Compression.none`` and ``Compression.fp16``."""

from __future__ import annotations

from typing import Any


class NoneCompressor:
    """Leaves tensors as they are."""

    @staticmethod
    def compress(tensor: Any) -> tuple[Any, Any]:
        """(tensor, context for :meth:`decompress`)."""
        return tensor, None

    @staticmethod
    def decompress(tensor: Any, ctx: Any) -> Any:
        """The tensor :meth:`compress` received."""
        del ctx
        return tensor


class FP16Compressor:
    """Floating-point tensors travel as float16 and come back in their own dtype (values rounded to
    float16 before the reduction, as with Horovod)."""

    @staticmethod
    def compress(tensor: Any) -> tuple[Any, Any]:
        """(float16 tensor, the original dtype)."""
        import tensorflow as tf

        if tensor.dtype.is_floating and tensor.dtype != tf.float16:
            return tf.cast(tensor, tf.float16), tensor.dtype
        return tensor, None

    @staticmethod
    def decompress(tensor: Any, ctx: Any) -> Any:
        """Back to the dtype :meth:`compress` saw."""
        import tensorflow as tf

        return tf.cast(tensor, ctx) if ctx is not None else tensor


class Compression:
    """Horovod's compression choices."""

    none = NoneCompressor
    fp16 = FP16Compressor
