"""Optimizer-state sharding, the pure parts: where each rank's shard lies in the flat weights, the checks
that refuse what a flat shard cannot do, and what the memory estimate says of sharding."""

from __future__ import annotations

import pytest

from tfdist.errors import ConfigError
from tfdist.estimate.plan import MIB, Device, EstimateConfig, LayerOutput, ModelSummary, estimate
from tfdist.sync.shard import ShardLayout, check_backend, check_optimizer, check_wire


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
        (lambda: check_wire("fp16", None), "does not combine with compression='fp16'"),
        (lambda: check_wire(None, 4.0), "bucket_mb=4.0"),
    ],
)
def test_what_cannot_be_sharded_is_one_line(call, expected: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TFDIST_COMPRESSION", raising=False)
    monkeypatch.delenv("TFDIST_BUCKET_MB", raising=False)
    with pytest.raises(ConfigError, match=expected.replace("(", r"\(").replace(")", r"\)")):
        call()


def test_the_wire_s_defaults_are_not_a_request(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TFDIST_COMPRESSION", raising=False)
    monkeypatch.delenv("TFDIST_BUCKET_MB", raising=False)
    check_wire(None, None)
    check_wire("none", 0)
    monkeypatch.setenv("TFDIST_COMPRESSION", "bf16")
    with pytest.raises(ConfigError, match="compression='bf16'"):
        check_wire(None, None)


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
