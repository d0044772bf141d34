"""The memory arithmetic of ``tfdist estimate`` (pure: no TensorFlow)."""

from __future__ import annotations

import pytest

from tfdist.errors import ConfigError
from tfdist.estimate.plan import (
    BATCH_NORM_BYTES,
    FIRST_STEP_BYTES,
    IDLE_PROCESS_BYTES,
    MIB,
    Device,
    EstimateConfig,
    LayerOutput,
    ModelSummary,
    estimate,
    kept_activations,
    optimizer_slots,
    parse_size,
)

#: Two dense layers 100 -> 1000 -> 10 (101,000 + 10,010 parameters), batch elements 1,000 and 10.
MLP = ModelSummary(
    name="mlp",
    trainable=(100_000, 1_000, 10_000, 10),
    non_trainable=0,
    layers=(
        LayerOutput("in", "InputLayer", 100),
        LayerOutput("h", "Dense", 1000),
        LayerOutput("o", "Dense", 10),
    ),
    input_elements=100,
)


def terms(result: object) -> dict[str, int]:
    return {t.name: t.bytes for t in result.terms}  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("80GB", 80 * 10**9),
        ("80 GB", 80 * 10**9),
        ("16GiB", 16 * 2**30),
        ("40G", 40 * 2**30),
        ("24576MiB", 24576 * 2**20),
        ("1.5TB", 1_500_000_000_000),
        ("1048576", 1048576),
    ],
)
def test_sizes(text: str, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "eighty", "80XB", "-1GB", "0GB", "GB"])
def test_bad_sizes(text: str) -> None:
    with pytest.raises(ConfigError, match="not a memory size"):
        parse_size(text)


@pytest.mark.parametrize(
    ("name", "config", "slots"),
    [
        ("sgd", {}, 0),
        ("sgd", {"momentum": 0.9}, 1),
        ("momentum", {}, 1),
        ("adam", {}, 2),
        ("adam", {"amsgrad": True}, 3),
        ("adamw", {}, 2),
        ("rmsprop", {}, 1),
        ("rmsprop", {"momentum": 0.9}, 2),
        ("rmsprop", {"momentum": 0.9, "centered": True}, 3),
        ("adam", {"use_ema": True}, 3),
    ],
)
def test_optimizer_slots(name: str, config: dict[str, object], slots: int) -> None:
    assert optimizer_slots(name, config) == slots


@pytest.mark.parametrize(("optimizer", "slots"), [("sgd", 0), ("momentum", 1), ("adam", 2), ("rmsprop", 1)])
def test_slots_scale_the_optimizer_term(optimizer: str, slots: int) -> None:
    result = estimate(MLP, EstimateConfig(8, optimizer))
    assert terms(result)["optimizer slots"] == slots * MLP.params * 4 + 16
    assert result.slots == slots


def test_every_term_of_a_float32_replica() -> None:
    got = terms(estimate(MLP, EstimateConfig(batch_per_replica=8, optimizer="adam", margin=0.1)))
    params = 111_010
    model = {
        "weights": params * 4,
        "gradients": params * 4,
        "optimizer slots": 2 * params * 4 + 16,
        "activations": 8 * (1000 + 10) * 4,  # the input layer is counted as input batches
        "input batches": 3 * 8 * 100 * 4,
        "optimizer update": 100_000 * 4,
        "backprop in flight": 2 * 8 * 1000 * 4,
    }
    for name, value in model.items():
        assert got[name] == value, name
    assert got["framework baseline"] == IDLE_PROCESS_BYTES
    assert got["first step"] == FIRST_STEP_BYTES
    assert got["margin"] == pytest.approx(0.1 * sum(model.values()), abs=1)
    assert "all-reduce buffer" not in got


def test_mixed_precision_keeps_float32_variables_and_halves_activations() -> None:
    fp32 = terms(estimate(MLP, EstimateConfig(8, "adam")))
    mixed = terms(estimate(MLP, EstimateConfig(8, "adam", precision="mixed_bfloat16")))
    assert mixed["weights"] == fp32["weights"] and mixed["optimizer slots"] == fp32["optimizer slots"]
    assert mixed["gradients"] == fp32["gradients"]
    assert mixed["activations"] * 2 == fp32["activations"]
    assert mixed["half-precision weights"] == 111_010 * 2


def test_replicas_add_the_all_reduce_buffer() -> None:
    got = terms(estimate(MLP, EstimateConfig(8, "sgd", replicas=8)))
    assert got["all-reduce buffer"] == got["gradients"]


def test_batch_norm_layers_cost_a_fixed_amount_each_whatever_the_batch() -> None:
    """The measured per-layer cost of batch norm (benchmarks/results/estimate_conv.json): counted once per
    layer, not per example; convolutions and dense layers get none."""
    norms = tuple(LayerOutput(f"bn{i}", "BatchNormalization", 4096) for i in range(3))
    convs = (LayerOutput("in", "InputLayer", 3072), LayerOutput("c", "Conv2D", 4096), *norms)
    cnn = ModelSummary("cnn", trainable=(864, 32, 32), non_trainable=64, layers=convs, input_elements=3072)
    for batch in (2, 64):
        assert terms(estimate(cnn, EstimateConfig(batch)))["batch-norm layers"] == 3 * BATCH_NORM_BYTES
    without = ModelSummary("c", trainable=(864,), non_trainable=0, layers=convs[:2], input_elements=3072)
    assert "batch-norm layers" not in terms(estimate(without, EstimateConfig(8)))
    assert "batch-norm layers" not in terms(estimate(MLP, EstimateConfig(8)))


def test_activations_scale_with_the_batch() -> None:
    small = terms(estimate(MLP, EstimateConfig(8)))
    large = terms(estimate(MLP, EstimateConfig(64)))
    assert large["activations"] == 8 * small["activations"]
    assert large["weights"] == small["weights"]


@pytest.mark.parametrize(
    ("layers", "kept"),
    [
        ((LayerOutput("x", "InputLayer", 50),), 0),
        ((LayerOutput("f", "Flatten", 50), LayerOutput("d", "Dense", 10)), 10),
        ((LayerOutput("d", "Dropout", 50),), 100),
        ((LayerOutput("c", "Conv2D", 7), LayerOutput("b", "BatchNormalization", 7)), 14),
    ],
)
def test_kept_activations(layers: tuple[LayerOutput, ...], kept: int) -> None:
    assert kept_activations(layers) == kept


def test_compiled_optimizer_is_the_default_and_adam_without_one() -> None:
    compiled = ModelSummary("m", (10,), 0, (), 1, optimizer=("rmsprop", 3))
    assert estimate(compiled, EstimateConfig(1)).optimizer == "rmsprop"
    assert estimate(compiled, EstimateConfig(1, "sgd")).optimizer == "sgd"
    assert estimate(MLP, EstimateConfig(1)).optimizer == "adam"


@pytest.mark.parametrize(
    ("device", "fits"),
    [
        (Device("big", 10 * 2**30), True),
        (Device("tiny", 100 * MIB), False),
        (Device("ram", 1500 * MIB, shared_by=2), False),  # two replicas of ~800 MiB share it
        (None, None),
    ],
)
def test_the_verdict_against_a_device(device: Device | None, fits: bool | None) -> None:
    assert estimate(MLP, EstimateConfig(8), device).fits is fits


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"batch_per_replica": 0}, "at least one example"),
        ({"batch_per_replica": -4}, "at least one example"),
        ({"batch_per_replica": 8, "optimizer": "lamb"}, "unknown optimizer 'lamb'"),
        ({"batch_per_replica": 8, "precision": "float8"}, "unknown precision"),
        ({"batch_per_replica": 8, "replicas": 0}, "at least one replica"),
    ],
)
def test_bad_configs(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        EstimateConfig(**kwargs)  # type: ignore[arg-type]


def test_json_carries_every_term_and_the_verdict() -> None:
    result = estimate(MLP, EstimateConfig(8), Device("GPU 0", 80 * 10**9))
    out = result.to_dict()
    assert [t["name"] for t in out["terms"]][-1] == "margin"
    assert out["total_bytes"] == sum(t["bytes"] for t in out["terms"])
    assert out["fits"] is True and out["device"]["bytes"] == 80 * 10**9
