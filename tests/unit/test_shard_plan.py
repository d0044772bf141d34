"""Optimizer-state sharding, the pure parts: where each rank's shard lies in the flat weights, the checks
that refuse what a flat shard cannot do, and what the memory estimate says of sharding."""

from __future__ import annotations

import numpy as np
import pytest

from tfdist.errors import ConfigError
from tfdist.estimate.plan import MIB, Device, EstimateConfig, LayerOutput, ModelSummary, estimate
from tfdist.sync.reduce import scatter_sum_16
from tfdist.sync.shard import bucket_choice, check_backend, check_not_parameter_server, check_optimizer
from tfdist.sync.shard_layout import ShardLayout
from tfdist.sync.wire import RELATIVE_ERROR, encode


@pytest.mark.parametrize(
    ("sizes", "rank", "size", "shard", "pieces", "padding"),
    [
        ((6, 3), 0, 2, 5, ((0, 0, 5),), 0),
        ((6, 3), 1, 2, 5, ((0, 5, 6), (1, 0, 3)), 1),
        ((40, 5, 15, 3), 3, 4, 16, ((2, 3, 15), (3, 0, 3)), 1),  # the test model's 63 weights
        ((4,), 0, 1, 4, ((0, 0, 4),), 0),
        ((2,), 3, 4, 1, (), 1),  # fewer weights than ranks: a shard of padding only
    ],
)
def test_the_layout_of_each_rank_s_shard(
    sizes: tuple[int, ...], rank: int, size: int, shard: int, pieces: tuple, padding: int
) -> None:
    layout = ShardLayout(sizes, rank, size)
    assert (layout.shard, layout.pieces, layout.padding) == (shard, pieces, padding)
    assert layout.padded == shard * size >= layout.total


def test_the_shards_of_every_rank_cover_the_weights_once() -> None:
    sizes = (7, 1, 12, 5)
    seen = []
    for rank in range(3):
        layout = ShardLayout(sizes, rank, 3)
        seen += [(i, e) for i, a, b in layout.pieces for e in range(a, b)]
    assert seen == [(i, e) for i, n in enumerate(sizes) for e in range(n)]


@pytest.mark.parametrize(
    ("buckets", "rank", "segments", "padding"),
    [
        (((1,), (0,)), 1, ((1, 2, 3, 0), (0, 3, 6, 2)), 1),  # the docstring's
        (((1,), (0,)), 0, ((1, 0, 2, 0), (0, 0, 3, 2)), 0),
        (((3, 2), (1, 0)), 0, ((3, 0, 3, 0), (2, 0, 6, 3), (1, 0, 5, 9), (0, 0, 18, 14)), 0),
        (((3, 2), (1, 0)), 1, ((2, 6, 15, 0), (0, 18, 40, 9)), 1),
    ],
)
def test_a_bucketed_shard_is_its_slice_of_every_bucket(
    buckets: tuple, rank: int, segments: tuple, padding: int
) -> None:
    sizes = (6, 3) if len(buckets[0]) == 1 else (40, 5, 15, 3)
    layout = ShardLayout(sizes, rank, 2, buckets)
    assert layout.segments() == segments and layout.padding == padding


@pytest.mark.parametrize("size", [1, 2, 3, 4])
@pytest.mark.parametrize("buckets", [(), ((3, 2), (1,), (0,)), ((3, 2, 1, 0),), ((0, 1, 2, 3),)])
def test_every_rank_s_shard_put_together_gives_back_every_weight(size: int, buckets: tuple) -> None:
    """What the all-gather and a checkpoint's gather do: each rank's shard (own) as the rows, unshard."""
    sizes = (40, 5, 15, 3)
    rng = np.random.default_rng(size)
    flats = [rng.normal(size=n).astype(np.float32) for n in sizes]
    layouts = [ShardLayout(sizes, r, size, buckets) for r in range(size)]
    rows = np.stack([layout.own(flats) for layout in layouts])
    assert rows.shape == (size, layouts[0].shard)
    for got, want in zip(layouts[0].unshard(rows), flats, strict=True):
        assert np.array_equal(got, want)
    assert sum(layout.shard - layout.padding for layout in layouts) == sum(sizes)


def test_buckets_must_hold_each_variable_once() -> None:
    with pytest.raises(ValueError, match="do not hold each of 2 variables once"):
        ShardLayout((6, 3), 0, 2, ((1,), (1,)))


def test_the_bucket_size_of_a_sharded_job(monkeypatch: pytest.MonkeyPatch) -> None:
    """tfdist.fit's bucket_mb, else TFDIST_BUCKET_MB set by hand, else the backend's (0 on one node)."""
    monkeypatch.delenv("TFDIST_BUCKET_MB", raising=False)
    assert bucket_choice(None, 0.0) == 0.0
    assert bucket_choice(None, 2.0) == 2.0
    assert bucket_choice(4.0, 0.0) == 4.0
    monkeypatch.setenv("TFDIST_BUCKET_MB", "1.5")
    assert bucket_choice(None, 0.0) == 1.5
    assert bucket_choice(0.0, 2.0) == 0.0  # tfdist.fit's option wins over the variable
    monkeypatch.setenv("TFDIST_BUCKET_MB", "auto")  # not measured for a shard: the backend's size now
    assert bucket_choice(None, 0.0) == 0.0 and bucket_choice("auto", 2.0) == 2.0
    monkeypatch.setenv("TFDIST_BUCKET_MB", "lots")
    with pytest.raises(ConfigError, match="TFDIST_BUCKET_MB='lots' is not a bucket size"):
        bucket_choice(None, 0.0)


class SGD:
    clipnorm = global_clipnorm = None


class Adam(SGD):
    pass


class AdamW(SGD):
    _exclude_from_weight_decay = ("bias",)


class Clipped(SGD):
    pass


class Adafactor(SGD):
    pass


def clipped() -> Adam:
    opt = Adam()
    opt.global_clipnorm = 1.0
    return opt


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (Adafactor, "supports the element-wise optimizers SGD, Adam, AdamW, RMSprop; got Adafactor"),
        (clipped, "does not support clipnorm / global_clipnorm"),
        (AdamW, "does not support exclude_from_weight_decay"),
    ],
)
def test_optimizers_a_flat_shard_would_change_are_refused(make, expected: str) -> None:
    with pytest.raises(ConfigError, match=expected.replace("(", r"\(").replace(")", r"\)")):
        check_optimizer(make())


def test_element_wise_optimizers_pass() -> None:
    check_optimizer(SGD())
    check_optimizer(Adam())


@pytest.mark.parametrize(
    ("call", "expected"),
    [
        (lambda: check_backend("tf"), "shard_optimizer needs the mpi backend, but this run's backend is tf"),
        (lambda: check_backend("horovod"), "this run's backend is horovod"),
        (lambda: ShardLayout((), 0, 2), "the model has no trainable weights"),
        (lambda: check_not_parameter_server(True), "does not apply under ParameterServerStrategy"),
    ],
)
def test_what_cannot_be_sharded_is_one_line(call, expected: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TFDIST_COMPRESSION", raising=False)
    monkeypatch.delenv("TFDIST_BUCKET_MB", raising=False)
    with pytest.raises(ConfigError, match=expected.replace("(", r"\(").replace(")", r"\)")):
        call()


def test_sharding_left_out_under_a_parameter_server_says_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TFDIST_SHARD_OPTIMIZER", raising=False)
    check_not_parameter_server(None)
    check_not_parameter_server(False)
    monkeypatch.setenv("TFDIST_SHARD_OPTIMIZER", "1")
    with pytest.raises(ConfigError, match="ParameterServerStrategy"):
        check_not_parameter_server(None)


class Ranks:
    """Every rank's ``Ialltoall`` at once, in one process: rank ``r``'s view is ``Ranks.comm(r)``."""

    def __init__(self, sent: list[np.ndarray]) -> None:
        self.sent = sent

    def comm(self, rank: int) -> object:
        ranks = self

        class Comm:  # mpi4py's method names
            def Get_size(self) -> int:
                return len(ranks.sent)

            def Ialltoall(self, send: np.ndarray, recv: np.ndarray) -> str:
                assert send is ranks.sent[rank]
                step = send.size // len(ranks.sent)
                for j, theirs in enumerate(ranks.sent):  # slice `rank` of every rank's buffer
                    recv[j * step : (j + 1) * step] = theirs[rank * step : (rank + 1) * step]
                return "done"

        return Comm()


class Done:
    def wait(self, request: str) -> None:
        assert request == "done"


def widen(rounded: np.ndarray, compression: str) -> np.ndarray:
    """16-bit values back to float32, written out here (not the wire's decode)."""
    if compression == "fp16":
        return rounded.astype(np.float32)
    return (rounded.astype(np.uint32) << 16).view(np.float32)


@pytest.mark.parametrize("compression", ["fp16", "bf16"])
@pytest.mark.parametrize("size", [2, 3])
def test_the_16_bit_reduce_scatter_sums_each_slice_in_float32(compression: str, size: int) -> None:
    """Each rank gets its slice of the sum of the rounded gradients, added in float32 in rank order: within
    one rounding of the exact sum per term, and not rounded again."""
    rng = np.random.default_rng(1)
    grads = [rng.normal(size=12 * size).astype(np.float32) for _ in range(size)]
    sent = [encode(g, compression).view(np.uint16) for g in grads]
    ranks = Ranks(sent)
    got = np.concatenate([scatter_sum_16(ranks.comm(r), sent[r], compression, Done()) for r in range(size)])
    assert got.dtype == np.float32
    widened = [widen(encode(g, compression), compression) for g in grads]
    want = widened[0].copy()
    for w in widened[1:]:
        want += w
    assert np.array_equal(got, want)  # the float32 sum of the rounded values, bit for bit
    exact = np.sum(grads, axis=0, dtype=np.float64)
    bound = RELATIVE_ERROR[compression] * np.sum(np.abs(grads), axis=0) + 1e-6
    assert np.all(np.abs(got - exact) <= bound)
    assert np.any(got != exact.astype(np.float32))  # really rounded


def test_the_16_bit_reduce_scatter_needs_equal_slices() -> None:
    sent = [np.zeros(5, np.uint16), np.zeros(5, np.uint16)]
    with pytest.raises(ValueError, match="5 values do not split into 2"):
        scatter_sum_16(Ranks(sent).comm(0), sent[0], "fp16", Done())


# A dense model of 100M float32 parameters (the benchmark's), Adam: weights + gradients + 2 slots.
DENSE = ModelSummary(
    name="dense-100m",
    trainable=(100_000_000,),
    non_trainable=0,
    layers=(LayerOutput("dense", "Dense", 10),),
    input_elements=10,
)


def test_sharding_divides_the_slots_by_the_replicas() -> None:
    plain = estimate(DENSE, EstimateConfig(8, "adam", replicas=4, backend="mpi"))
    sharded = estimate(DENSE, EstimateConfig(8, "adam", replicas=4, backend="mpi", shard_optimizer=True))
    slots = {
        e.shard_optimizer: next(t.bytes for t in e.terms if t.name == "optimizer slots")
        for e in (plain, sharded)
    }
    assert slots == {False: 800_000_016, True: 200_000_016}
    assert plain.sharded_total == sharded.total and sharded.unsharded_total == plain.total
    saved = plain.total - sharded.total  # Adam on 4: 3/4 of the slots, and their share of the margin
    assert 600_000_000 <= saved <= 600_000_000 * 1.11
    assert "sharded over 4 replicas" in plain.notes[0]


def test_the_estimate_says_when_sharding_is_what_fits() -> None:
    plain = estimate(DENSE, EstimateConfig(8, "adam", replicas=4, backend="mpi"))
    room = (plain.total + plain.sharded_total) // 2  # between the two
    fitted = estimate(DENSE, EstimateConfig(8, "adam", replicas=4, backend="mpi"), Device("gpu", room))
    assert fitted.fits is False and fitted.sharding_makes_it_fit
    assert fitted.notes[0].endswith("sharding the optimizer is what makes this job fit.")
    assert fitted.to_dict()["sharding_makes_it_fit"] is True
    big = estimate(DENSE, EstimateConfig(8, "adam", replicas=4, backend="mpi"), Device("gpu", 64_000 * MIB))
    assert big.fits and not big.sharding_makes_it_fit


@pytest.mark.parametrize(
    ("config", "why"),
    [
        (EstimateConfig(8, "adam", replicas=1, backend="mpi"), "one replica"),
        (EstimateConfig(8, "sgd", replicas=4, backend="mpi"), "no slots"),
    ],
)
def test_no_sharding_line_where_it_changes_nothing(config: EstimateConfig, why: str) -> None:
    result = estimate(DENSE, config)
    assert result.notes == () and result.sharded_total is None, why


def test_sharding_on_a_backend_that_cannot_is_refused() -> None:
    with pytest.raises(ConfigError, match="shard_optimizer needs the mpi backend, not tf"):
        EstimateConfig(8, "adam", replicas=2, backend="tf", shard_optimizer=True)
