"""The MPI backend's wire (tfdist.sync.wire): 16-bit round trips within their stated error, the bucket
plan, and bad values of the options (one line, exit 2, nothing written)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from helpers.cli import cli
from tfdist.errors import ConfigError
from tfdist.sync.wire import (
    RELATIVE_ERROR,
    WIRE_DTYPES,
    WireOptions,
    check_auto_share,
    check_bucket_mb,
    check_bucket_setting,
    check_compression,
    choose_buckets,
    decode,
    encode,
    plan_buckets,
)


@pytest.mark.parametrize("compression", ["fp16", "bf16"])
def test_round_trip_is_within_half_a_unit_in_the_last_place(compression: str) -> None:
    rng = np.random.default_rng(0)
    # Inside the normal range of both formats (fp16's smallest normal is 6.1e-5, its largest 65504).
    signs = rng.choice([-1.0, 1.0], 100_000)
    values = (signs * 10.0 ** rng.uniform(-4, 4.5, 100_000)).astype(np.float32)
    wire = encode(values, compression)
    assert wire.dtype == WIRE_DTYPES[compression] and wire.nbytes * 2 == values.nbytes
    back = decode(wire, compression)
    assert back.dtype == np.float32
    relative = np.abs(back.astype(np.float64) - values) / np.abs(values.astype(np.float64))
    assert relative.max() <= RELATIVE_ERROR[compression]
    assert relative.max() > RELATIVE_ERROR[compression] / 4  # it really rounds (not a float32 copy)
    assert np.array_equal(decode(encode(back, compression), compression), back)  # 16-bit values are exact


def test_bf16_rounds_to_nearest_even_and_keeps_specials() -> None:
    ulp = np.float32(2.0**-7)  # bf16's spacing at 1.0
    values = np.array([1 + ulp / 2, 1 + 3 * ulp / 2, np.inf, -np.inf, np.nan, 0.0, -0.0, 3e38], np.float32)
    back = decode(encode(values, "bf16"), "bf16")
    assert back[0] == 1.0 and back[1] == 1 + 2 * ulp  # ties go to the even neighbour
    assert np.isposinf(back[2]) and np.isneginf(back[3]) and np.isnan(back[4])
    assert back[5] == 0.0 and np.signbit(back[6]) and np.isfinite(back[7])


def test_fp16_decodes_every_value_as_numpy_does() -> None:
    """The wire's float16 decoding (a table, fast for subnormals too) gives NumPy's float32 bits for every
    one of the 65,536 patterns: zeros, subnormals, normals, infinities and NaN payloads."""
    every = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    expected = every.view(np.float16).astype(np.float32)
    assert np.array_equal(decode(every, "fp16").view(np.uint32), expected.view(np.uint32))
    assert np.array_equal(decode(every.view(np.float16), "fp16").view(np.uint32), expected.view(np.uint32))
    out = np.empty(65536, np.float32)
    assert decode(every, "fp16", out=out) is out and np.array_equal(
        out.view(np.uint32), expected.view(np.uint32)
    )


def test_fp16_overflows_to_inf_as_stated() -> None:
    back = decode(encode(np.array([70000.0, -70000.0, 1e-9], np.float32), "fp16"), "fp16")
    assert np.isposinf(back[0]) and np.isneginf(back[1]) and back[2] == 0.0


@pytest.mark.parametrize(
    ("sizes", "bucket_bytes", "expected"),
    [
        ([10, 100, 5, 1], 50, [[3, 2, 1], [0]]),
        ([10, 100], 0, [[1, 0]]),
        ([192, 32, 32, 4], 31.5, [[3, 2], [1], [0]]),
        ([8, 8, 8, 8], 8, [[3], [2], [1], [0]]),
        ([1000], 1, [[0]]),
        ([], 4, []),
    ],
)
def test_buckets_follow_the_backward_pass(
    sizes: list[int], bucket_bytes: float, expected: list[list[int]]
) -> None:
    assert plan_buckets(sizes, bucket_bytes) == expected


def test_options_from_the_environment() -> None:
    default = WireOptions.from_environment({})
    assert default == WireOptions("none", "auto") and default.auto and default.bucket_size == 0.0
    got = WireOptions.from_environment({"TFDIST_COMPRESSION": "BF16", "TFDIST_BUCKET_MB": "4"})
    assert got == WireOptions("bf16", 4.0) and not got.auto and got.bucket_size == 4.0
    assert WireOptions.from_environment({"TFDIST_BUCKET_MB": " AUTO "}).auto
    with pytest.raises(ConfigError, match="TFDIST_COMPRESSION='int8' is not a compression"):
        WireOptions.from_environment({"TFDIST_COMPRESSION": "int8"})
    with pytest.raises(ConfigError, match=r"TFDIST_BUCKET_MB='-2' is not a bucket size"):
        WireOptions.from_environment({"TFDIST_BUCKET_MB": "-2"})


@pytest.mark.parametrize(
    ("exposed", "step", "size"),
    [
        ([0.046, 0.044], [0.170, 0.168], 2.0),  # 1 Gbit/s: the sum is 27 % of the step, buckets paid
        ([0.011, 0.012], [0.130, 0.131], 0.0),  # the uncapped link: 9 %, buckets cost
        ([0.011, 0.040], [0.130, 0.150], 2.0),  # the slowest rank's share decides, the same everywhere
        ([0.125], [0.625], 2.0),  # exactly a fifth
    ],
)
def test_auto_buckets_pay_where_the_sum_is_a_fifth_of_the_step(
    exposed: list[float], step: list[float], size: float
) -> None:
    got, share = choose_buckets(exposed, step)
    assert got == size and share == pytest.approx(max(e / s for e, s in zip(exposed, step, strict=True)))


@pytest.mark.parametrize("value", ["fp8", "", 16, None])
def test_bad_compressions(value: object) -> None:
    with pytest.raises(ConfigError, match="is not a compression; choose one of none, fp16, bf16"):
        check_compression(value, "compression")


@pytest.mark.parametrize("value", [-1, "x", float("nan"), float("inf"), True, "automatic"])
def test_bad_bucket_sizes(value: object) -> None:
    with pytest.raises(ConfigError, match="is not a bucket size"):
        check_bucket_mb(value, "bucket_mb")
    with pytest.raises(ConfigError, match=r"is not a bucket size; give megabytes >= 0 .* or auto\."):
        check_bucket_setting(value, "bucket_mb")


@pytest.mark.parametrize("value", [-0.1, 1.5, "0.2", True, float("nan")])
def test_bad_auto_shares(value: object) -> None:
    with pytest.raises(ConfigError, match="is not a share of a step; give a number from 0 to 1"):
        check_auto_share(value, "TFDIST_BUCKET_AUTO_SHARE")


@pytest.mark.parametrize(("cores", "size"), [([1, 4], 0.0), ([1], 0.0), ([2, 2], 2.0), ([], 2.0)])
def test_auto_buckets_need_a_core_beside_the_backward_pass(cores: list[int], size: float) -> None:
    # One core per host, 1 Gbit/s: 2 MB buckets ran slower than one sum (docs/performance.md).
    assert choose_buckets([0.046, 0.044], [0.170, 0.168], cores=cores) == (size, pytest.approx(0.046 / 0.170))


def test_the_auto_threshold_moves_the_choice() -> None:
    assert check_auto_share(0, "x") == 0.0 and check_auto_share(1, "x") == 1.0
    assert choose_buckets([0.011], [0.130], threshold=0.05)[0] == 2.0
    assert choose_buckets([0.046], [0.170], threshold=0.5)[0] == 0.0


def test_auto_is_a_bucket_setting_not_a_size() -> None:
    assert check_bucket_setting("Auto", "bucket_mb") == "auto" and check_bucket_setting("4", "b") == 4.0
    with pytest.raises(ConfigError, match="'auto' is not a bucket size"):
        check_bucket_mb("auto", "bucket_mb")


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["train", "--compression", "fp17"], "--compression='fp17' is not a compression"),
        (["train", "--bucket-mb", "-1"], "--bucket-mb='-1' is not a bucket size"),
        (["train", "--compression", "fp16"], "but no --workers were given"),
        (["train", "--workers", "2", "--backend", "tf", "--bucket-mb", "4"], "but the backend is tf"),
        (
            ["train", "--shard-optimizer"],
            "splits the optimizer's slots between mpi workers, but no --workers",
        ),
        (
            ["train", "--workers", "2", "--backend", "tf", "--shard-optimizer"],
            "workers, but the backend is tf",
        ),
        (["bench", "--compression", "int8"], "--compression 'int8': unknown int8"),
        (["bench", "--bucket-mb", "0,x"], "--bucket-mb='x' is not a bucket size"),
        (["bench", "--bucket-mb", "2,2"], "--bucket-mb '2,2' repeats a size"),
        (["bench", "--backend", "tf", "--compression", "fp16"], "vary the mpi backend, but --backend is tf"),
    ],
)
def test_bad_wire_flags_exit_2_with_one_line(
    argv: list[str],
    expected: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    code, _, err = cli(capsys, *argv)
    assert code == 2
    err = err.strip()
    assert expected in err and len(err.splitlines()) == 1, err
    assert os.listdir(tmp_path) == []


def test_fit_option_for_another_backend_is_one_clear_error() -> None:
    from tfdist.train.options import FitOptions

    with pytest.raises(ConfigError, match="compression='fp8' is not a compression"):
        FitOptions(epochs=1, compression="fp8")
    assert FitOptions(epochs=1, compression="FP16", bucket_mb=2).compression == "fp16"


def test_the_bench_says_when_wire_variants_cannot_differ() -> None:
    from tfdist.bench.config import BenchConfig
    from tfdist.bench.plan import plan_bench

    one_node = BenchConfig(out="x", backends=("mpi",), compression=("none", "fp16"), bucket_mb=(0.0, 2.0))
    plan = plan_bench(one_node, cores=2, gpus=0)
    assert [s.name for s in plan.runs if s.workers == 2] == [
        "mpi-b0-w2-r1", "mpi-b2-w2-r1", "mpi-fp16-b0-w2-r1", "mpi-fp16-b2-w2-r1"
    ]  # fmt: skip
    assert plan.runs[-1].wire_env == {"TFDIST_COMPRESSION": "fp16", "TFDIST_BUCKET_MB": "2"}
    assert any("on one node they share memory" in w for w in plan.warnings)
    across = BenchConfig(out="x", backends=("mpi",), bucket_mb=(2.0,), hosts=("n1", "n2"), nodes=(2,))
    assert not any("--bucket-mb" in w for w in plan_bench(across, cores=2, gpus=0).warnings)
