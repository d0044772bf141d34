"""What the MPI backend puts on the wire: compression (16-bit floats) and gradient buckets (pure).

Compression is lossy and opt-in: ``fp16`` / ``bf16`` round every float32 to 16 bits before it leaves the
node and once more after the sum, which is added in float32 (a relative error of at most 2**-11 / 2**-8 per
rounding; fp16 overflows above 65,504). Nothing is compressed within a node. Buckets group the gradients in
the order the backward pass produces them; each bucket's sum starts as soon as it exists. They pay where
the sum is a large share of the step (a slow link) and cost where it is not, so ``auto`` (the default)
decides from the job's first steps (:func:`choose_buckets`; measured in docs/performance.md).
"""

from __future__ import annotations

import functools
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
            "pass), e.g. 4, or auto."
        )
    return float(number)


AUTO = "auto"
#: ``auto``: the steps whose gradient sums it measures (after the first, which also traced the step).
AUTO_STEPS = 8
#: ``auto``: buckets when the sum after the backward pass takes at least this share of a step (between
#: the shares measured where buckets paid and where they cost: docs/performance.md).
AUTO_SHARE = 0.2
#: ``auto``'s bucket size once buckets pay.
AUTO_MB = 2.0


def check_bucket_setting(value: object, where: str) -> float | str:
    """:func:`check_bucket_mb`, or ``"auto"``."""
    if isinstance(value, str) and value.strip().lower() == AUTO:
        return AUTO
    return check_bucket_mb(value, where)


def choose_buckets(
    exposed_s: Sequence[float],
    step_s: Sequence[float],
    threshold: float = AUTO_SHARE,
    cores: Sequence[int] = (),
) -> tuple[float, float]:
    """``auto``'s choice: (bucket MB, the share of a step its sum took), from every rank's median time of
    the gradient sum after the backward pass (``exposed_s``) and of a step (``step_s``): buckets of
    :data:`AUTO_MB` when the largest share reaches ``threshold`` (TFDIST_BUCKET_AUTO_SHARE, default
    :data:`AUTO_SHARE`) and every rank has a core beside its backward pass (``cores``: each rank's CPUs;
    on one core the bucket sums take the backward pass's time: measured slower than one sum, in
    docs/performance.md), else none. Pure; the same answer on every rank given the same table.

    Input/Output: ``choose_buckets([0.046, 0.044], [0.170, 0.168])`` -> ``(2.0, 0.27...)``;
    ``choose_buckets([0.011], [0.130])`` -> ``(0.0, 0.08...)``; ``choose_buckets([0.046], [0.170],
    cores=[1])`` -> ``(0.0, 0.27...)``.
    """
    share = max(e / s for e, s in zip(exposed_s, step_s, strict=True) if s > 0)
    spare = not cores or min(cores) > 1
    return (AUTO_MB if share >= threshold and spare else 0.0), share


def check_auto_share(value: object, where: str) -> float:
    """``value`` as auto's threshold, a share of a step from 0 to 1; ConfigError naming ``where``."""
    number = value if isinstance(value, int | float) and not isinstance(value, bool) else None
    if number is None or not 0 <= number <= 1:
        raise ConfigError(f"{where}={value!r} is not a share of a step; give a number from 0 to 1, e.g. 0.2.")
    return float(number)


@dataclass(frozen=True)
class WireOptions:
    """How the MPI backend sums gradients: the wire's compression and the bucket size (``auto``: none
    until the first steps measured, then as :func:`choose_buckets` says)."""

    compression: str = "none"
    bucket_mb: float | str = 0.0

    def __post_init__(self) -> None:
        check_compression(self.compression, "compression")
        check_bucket_setting(self.bucket_mb, "bucket_mb")

    @property
    def auto(self) -> bool:
        """Whether the bucket size is still to be measured."""
        return self.bucket_mb == AUTO

    @property
    def bucket_size(self) -> float:
        """The bucket size the step is traced with now (MB; ``auto``: 0 until decided)."""
        return 0.0 if self.bucket_mb == AUTO else float(self.bucket_mb)

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> WireOptions:
        """TFDIST_COMPRESSION and TFDIST_BUCKET_MB (their defaults when unset)."""
        return cls(
            compression=check_compression(variables.get("TFDIST_COMPRESSION", environ), "TFDIST_COMPRESSION"),
            bucket_mb=check_bucket_setting(variables.get("TFDIST_BUCKET_MB", environ), "TFDIST_BUCKET_MB"),
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


@functools.cache
def _fp16_table() -> np.ndarray:
    """Every float16 bit pattern's float32 value (256 KB), made on first use."""
    return np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.float16).astype(np.float32)


def encode(values: np.ndarray, compression: str) -> np.ndarray:
    """float32 ``values`` as the 16 bits that travel (round to nearest, ties to even)."""
    if compression == "fp16":
        with np.errstate(over="ignore"):  # beyond 65,504: inf, as the module says
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
        # A table of all 65,536 values, not ``astype``: NumPy converts float16 one value at a time, slowly
        # for subnormals, of which a summed gradient has many (docs/performance.md).
        values = _fp16_table()[wire.view(np.uint16)]
    if out is None:
        return values
    out[...] = values
    return out
