"""What the MPI backend puts on the wire: compression (16-bit floats) and gradient buckets.

Compression is lossy and opt-in. ``fp16`` and ``bf16`` round every float32 to 16 bits before it leaves
the node and once more after the sum (see :func:`tfdist.sync.reduce.NodeReducer`); the sums themselves
are added in float32. The loss per rounding is at most half a unit in the last place: a relative error of
2**-11 (fp16: 10-bit mantissa; values above 65,504 become inf, below 6e-8 become 0) or 2**-8 (bf16: 7-bit
mantissa, float32's range). Within one node (shared memory) nothing travels, so nothing is compressed.

Buckets: the gradients are grouped, in the order the backward pass produces them (the last layer's
first), into buckets of at least ``bucket_mb`` MB; each bucket's sum starts as soon as its gradients
exist, while the backward pass goes on. ``bucket_mb`` 0: one packed sum after the backward pass. The
default, 2 MB, was measured across two test hosts (mnist-cnn, one rank per host, 5 alternated repeats):
0.68x two unsynchronised copies against 0.57x without buckets at 1 Gbit/s, 0.75x against 0.78x on the
uncapped link (benchmarks/results/overlap-nodes-5x).

Pure: no TensorFlow, no MPI.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from tfdist import variables
from tfdist.errors import ConfigError

COMPRESSIONS = ("none", "fp16", "bf16")
#: What the wire carries for each compression.
WIRE_DTYPES = {"none": np.dtype(np.float32), "fp16": np.dtype(np.float16), "bf16": np.dtype(np.uint16)}
#: The largest relative error of one rounding (half a unit in the last place of the mantissa).
RELATIVE_ERROR = {"none": 0.0, "fp16": 2.0**-11, "bf16": 2.0**-8}


def check_compression(value: object, where: str) -> str:
    """``value`` as one of :data:`COMPRESSIONS`; ConfigError naming ``where`` it came from otherwise."""
    text = str(value).strip().lower() if isinstance(value, str) else None
    if text not in COMPRESSIONS:
        raise ConfigError(
            f"{where}={value!r} is not a compression; choose one of {', '.join(COMPRESSIONS)} "
            "(fp16/bf16 are lossy, MPI backend only)."
        )
    return text


def check_bucket_mb(value: object, where: str) -> float:
    """``value`` as a bucket size in MB (0 = no buckets); ConfigError naming ``where`` otherwise."""
    number = None if isinstance(value, bool) else value
    if isinstance(number, str):
        try:
            number = float(number)
        except ValueError:
            number = None
    if not isinstance(number, int | float) or not np.isfinite(number) or number < 0:
        raise ConfigError(
            f"{where}={value!r} is not a bucket size; give megabytes >= 0 (0: one sum after the backward "
            "pass), e.g. 4."
        )
    return float(number)


@dataclass(frozen=True)
class WireOptions:
    """How the MPI backend sums gradients: the wire's compression and the bucket size."""

    compression: str = "none"
    bucket_mb: float = 0.0

    def __post_init__(self) -> None:
        check_compression(self.compression, "compression")
        check_bucket_mb(self.bucket_mb, "bucket_mb")

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> WireOptions:
        """TFDIST_COMPRESSION and TFDIST_BUCKET_MB (their defaults when unset)."""
        return cls(
            compression=check_compression(variables.get("TFDIST_COMPRESSION", environ), "TFDIST_COMPRESSION"),
            bucket_mb=check_bucket_mb(variables.get("TFDIST_BUCKET_MB", environ), "TFDIST_BUCKET_MB"),
        )


def plan_buckets(sizes: Sequence[int], bucket_bytes: float) -> list[list[int]]:
    """Indices of gradients (``sizes`` in bytes, in the model's variable order) grouped into buckets in
    the order the backward pass produces them: from the last variable back.

    A bucket closes once it holds ``bucket_bytes`` or more. The last bucket (the first layers') is sent
    with the step's metric sums, when the backward pass is over.

    Input/Output: ``plan_buckets([10, 100, 5, 1], 50)`` -> ``[[3, 2, 1], [0]]``;
    ``plan_buckets([10, 100], 0)`` -> ``[[1, 0]]``.
    """
    order = list(range(len(sizes)))[::-1]
    if bucket_bytes <= 0:
        return [order] if order else []
    buckets: list[list[int]] = [[]]
    held = 0
    for index in order:
        if held >= bucket_bytes:
            buckets.append([])
            held = 0
        buckets[-1].append(index)
        held += sizes[index]
    return buckets if buckets[0] else []


def encode(values: np.ndarray, compression: str) -> np.ndarray:
    """float32 ``values`` as the 16 bits that travel (round to nearest, ties to even)."""
    if compression == "fp16":
        return values.astype(np.float16)
    if compression == "bf16":
        bits = values.view(np.uint32)
        # Round to nearest even on the upper 16 bits; NaN kept a (quiet) NaN, which rounding could turn
        # into inf.
        rounded = ((bits + (np.uint32(0x7FFF) + ((bits >> 16) & np.uint32(1)))) >> 16).astype(np.uint16)
        nan = np.isnan(values)
        if nan.any():
            rounded[nan] = np.uint16(0x7FC0)
        return rounded
    return values


def decode(wire: np.ndarray, compression: str, out: np.ndarray | None = None) -> np.ndarray:
    """The float32 values of :func:`encode`'s output (exact: every 16-bit value is a float32 value)."""
    # ``wire`` may be the bits (uint16) or the 16-bit type itself (float16, bfloat16).
    if compression == "bf16":
        wide = wire.view(np.uint16).astype(np.uint32) << np.uint32(16)
        values = wide.view(np.float32)
    else:
        values = wire.view(np.float16).astype(np.float32)
    if out is None:
        return values
    out[...] = values
    return out
