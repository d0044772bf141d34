"""Will this job fit? One training replica's memory as arithmetic on a model's shapes (pure: no TensorFlow;
:mod:`tfdist.estimate.read` makes the :class:`ModelSummary`). The terms: docs/guides/memory.md."""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tfdist.errors import ConfigError
from tfdist.estimate.result import MIB, Device, MemoryEstimate, Term, sharding_note

OPTIMIZERS = ("sgd", "momentum", "adam", "adamw", "rmsprop")
PRECISIONS = ("float32", "mixed_float16", "mixed_bfloat16")
#: Bytes of one activation element (the compute dtype); mixed policies keep variables and slots in float32.
COMPUTE_BYTES = {"float32": 4, "mixed_float16": 2, "mixed_bfloat16": 2}
#: Slot variables per trainable variable, as Keras 3.15's optimizers ``build`` them (momentum SGD: one).
BASE_SLOTS = {"sgd": 0, "momentum": 1, "adam": 2, "adamw": 2, "rmsprop": 1}
#: Temporaries of one variable's update, in copies of it: TensorFlow's elementwise kernels reuse an input's
#: buffer when nothing else holds it, so a chain of them costs about one new buffer at a time.
UPDATE_TEMPORARIES = 1
#: An idle TensorFlow + Keras process, and what the first ``model.fit`` step adds whatever the model
#: (benchmarks/estimate_accuracy.py measures them).
IDLE_PROCESS_BYTES = 646 * MIB
FIRST_STEP_BYTES = 150 * MIB
#: Input batches alive at once: the one in the step and tf.data's prefetched ones.
INPUT_BATCHES = 3
#: Copies of a layer's output backprop keeps: none of views and the input (counted as input batches), two
#: of Dropout's (output and mask), else one.
KEPT_COPIES = {"InputLayer": 0, "Flatten": 0, "Reshape": 0, "Permute": 1, "Dropout": 2}
#: A fixed cost per batch-norm layer's step, whatever the batch (benchmarks/estimate_accuracy.py --conv).
BATCH_NORM_BYTES = 8 * MIB
BATCH_NORMS = ("BatchNormalization",)
DEFAULT_MARGIN = 0.10
_SIZE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([KMGT]?)(i?)B?\s*$", re.IGNORECASE)


@dataclass(frozen=True)
class LayerOutput:
    """One layer's output, per example: ``elements`` values (the product of its shape past the batch)."""

    name: str
    kind: str
    elements: int


@dataclass(frozen=True)
class ModelSummary:
    """What the estimate needs of a model, read without its weights' values (the compiled optimizer's
    name and slots, if any)."""

    name: str
    trainable: tuple[int, ...]
    non_trainable: int
    layers: tuple[LayerOutput, ...]
    input_elements: int
    variable_bytes: int = 4
    optimizer: tuple[str, int] | None = None

    @property
    def params(self) -> int:
        """All parameters, trainable or not."""
        return sum(self.trainable) + self.non_trainable


@dataclass(frozen=True)
class EstimateConfig:
    """The job: batch per replica, optimizer (None: the model's compiled one, else Adam), precision
    policy, replicas and their backend, the margin (a fraction of the model's own terms)."""

    batch_per_replica: int
    optimizer: str | None = None
    precision: str = "float32"
    replicas: int = 1
    backend: str = "tf"
    margin: float = DEFAULT_MARGIN
    #: ZeRO stage 1 (``tfdist.fit(shard_optimizer=True)``, MPI backend): each replica keeps 1/N of the slots.
    shard_optimizer: bool = False

    def __post_init__(self) -> None:
        if self.batch_per_replica < 1:
            raise ConfigError(
                f"--batch-size-per-replica {self.batch_per_replica}: a batch holds at least one example."
            )
        if self.optimizer is not None and self.optimizer not in OPTIMIZERS:
            raise ConfigError(f"unknown optimizer {self.optimizer!r}; choose one of {', '.join(OPTIMIZERS)}.")
        if self.precision not in PRECISIONS:
            raise ConfigError(f"unknown precision {self.precision!r}; choose one of {', '.join(PRECISIONS)}.")
        if self.replicas < 1:
            raise ConfigError(f"--replicas {self.replicas}: at least one replica.")
        if not 0 <= self.margin <= 10:
            raise ConfigError(f"--margin {self.margin}: a fraction between 0 and 10 (0.1 = 10 %).")
        if self.shard_optimizer and self.backend != "mpi":
            raise ConfigError(
                f"shard_optimizer needs the mpi backend, not {self.backend}. Hint: estimate with backend mpi."
            )


def parse_size(text: str, source: str = "--device-memory") -> int:
    """Bytes from a size: decimal units (KB, MB, GB, TB: powers of 1000), binary ones (KiB, MiB, GiB, TiB,
    and the bare K, M, G, T as nvidia-smi shows them: powers of 1024), or a plain number of bytes.

    Input/Output: ``"80GB"`` -> ``80_000_000_000``; ``"16GiB"`` -> ``17_179_869_184``; ``"40G"`` -> 40 GiB.
    """
    match = _SIZE.match(text)
    if match is None or float(match.group(1)) <= 0:
        raise ConfigError(
            f"{source} {text!r} is not a memory size. Hint: write it as 80GB, 80GiB or 81920MiB."
        )
    value, unit, binary = match.groups()
    power = " KMGT".index(unit.upper()) if unit else 0
    has_b = text.strip().upper().endswith("B")
    base = 1024 if (binary or (unit and not has_b)) else 1000
    return int(float(value) * base**power)


def optimizer_slots(name: str, config: Mapping[str, Any] | None = None) -> int:
    """Slot variables per trainable variable for a Keras optimizer's name and config.

    Input/Output: ``("adam", {})`` -> 2; ``("adam", {"amsgrad": True})`` -> 3; ``("sgd", {"momentum":
    0.9})`` -> 1; ``("rmsprop", {"momentum": 0.9, "centered": True})`` -> 3.
    """
    config = config or {}
    if name == "sgd":
        slots = 1 if float(config.get("momentum") or 0) != 0 else 0
    elif name in BASE_SLOTS:
        slots = BASE_SLOTS[name]
    else:
        raise ConfigError(f"unknown optimizer {name!r}; choose one of {', '.join(OPTIMIZERS)}.")
    if name in ("adam", "adamw") and config.get("amsgrad"):
        slots += 1
    if name == "rmsprop":
        slots += int(float(config.get("momentum") or 0) > 0) + int(bool(config.get("centered")))
    # Keras keeps a moving average of the weights (use_ema) and accumulated gradients as more slots.
    slots += int(bool(config.get("use_ema"))) + int(bool(config.get("gradient_accumulation_steps")))
    return slots


def kept_activations(layers: tuple[LayerOutput, ...]) -> int:
    """Per-example elements that backprop keeps (:data:`KEPT_COPIES` of each layer's output)."""
    return sum(layer.elements * KEPT_COPIES.get(layer.kind, 1) for layer in layers)


def estimate(model: ModelSummary, config: EstimateConfig, device: Device | None = None) -> MemoryEstimate:
    """The memory of one replica of ``model`` trained as ``config`` says, against ``device``; with several
    replicas and an optimizer with slots, also the total in the other sharding mode, and a note."""
    optimizer, slots = _optimizer(model, config)
    terms = _terms(model, config, optimizer, slots, config.shard_optimizer)
    result = MemoryEstimate(
        model=model.name,
        params=model.params,
        optimizer=optimizer,
        slots=slots,
        precision=config.precision,
        batch_per_replica=config.batch_per_replica,
        replicas=config.replicas,
        terms=tuple(terms),
        device=device,
        shard_optimizer=config.shard_optimizer,
    )
    if config.replicas == 1 or slots == 0:
        return result
    other = sum(t.bytes for t in _terms(model, config, optimizer, slots, not config.shard_optimizer))
    result = dataclasses.replace(result, other_total=other)
    return dataclasses.replace(result, notes=(sharding_note(result),))


def _optimizer(model: ModelSummary, config: EstimateConfig) -> tuple[str, int]:
    """The optimizer's name and slots per weight: the config's, else the model's compiled one, else Adam."""
    if config.optimizer is not None:
        return config.optimizer, optimizer_slots(
            "sgd" if config.optimizer == "momentum" else config.optimizer,
            {"momentum": 0.9} if config.optimizer == "momentum" else {},
        )
    if model.optimizer is not None:
        return model.optimizer
    return "adam", BASE_SLOTS["adam"]


def _terms(
    model: ModelSummary, config: EstimateConfig, optimizer: str, slots: int, sharded: bool
) -> list[Term]:
    """Every term of one replica, the margin last; ``sharded``: slots / replicas (ZeRO stage 1)."""
    trainable = sum(model.trainable)
    vb, cb, batch = model.variable_bytes, COMPUTE_BYTES[config.precision], config.batch_per_replica
    mixed = config.precision != "float32"
    largest_var = max(model.trainable, default=0)
    largest_act = max((layer.elements for layer in model.layers), default=0)
    kept = kept_activations(model.layers)
    shards = config.replicas if sharded else 1
    slot_how = f"{optimizer}: {slots} per weight x {vb} B" + (
        f" / {shards} replicas (sharded)" if sharded else ""
    )
    terms = [
        Term("weights", model.params * vb, f"{model.params:,} params x {vb} B"),
        Term("gradients", trainable * vb, f"{trainable:,} trainable x {vb} B"),
        Term("optimizer slots", math.ceil(slots * trainable / shards) * vb + 16, slot_how),
    ]
    if mixed:
        terms.append(
            Term("half-precision weights", trainable * cb, f"{trainable:,} x {cb} B, kept for backprop")
        )
    terms += [
        Term("activations", batch * kept * cb, f"batch {batch} x {kept:,} kept values x {cb} B"),
        Term(
            "input batches",
            INPUT_BATCHES * batch * model.input_elements * 4,
            f"{INPUT_BATCHES} batches (in the step + prefetched) x {batch} x {model.input_elements:,} x 4 B",
        ),
    ]
    if config.replicas > 1 and sharded:
        # The flat gradients sent and the weights gathered are never alive together.
        how = "one packed copy: the gradients reduce-scattered, then the weights all-gathered"
        terms.append(Term("reduce-scatter / all-gather buffer", trainable * vb, how, "workspace"))
    elif config.replicas > 1:
        terms.append(
            Term("all-reduce buffer", trainable * vb, "one packed copy of the gradients", "workspace")
        )
    terms += [
        Term(
            "optimizer update",
            UPDATE_TEMPORARIES * largest_var * vb,
            f"{UPDATE_TEMPORARIES} temporary the size of the largest variable ({largest_var:,})",
            "workspace",
        ),
        Term(
            "backprop in flight",
            2 * batch * largest_act * cb,
            f"2 gradients of the largest activation ({largest_act:,} per example)",
            "workspace",
        ),
    ]
    norms = sum(1 for layer in model.layers if layer.kind in BATCH_NORMS)
    if norms:
        terms.append(
            Term(
                "batch-norm layers",
                norms * BATCH_NORM_BYTES,
                f"{norms} x {BATCH_NORM_BYTES // MIB} MiB, fixed per layer (not per example), measured",
                "workspace",
            )
        )
    model_bytes = sum(t.bytes for t in terms)
    terms += [
        Term(
            "framework baseline",
            IDLE_PROCESS_BYTES,
            "idle TF 2.21 + Keras 3.15 process, measured",
            "baseline",
        ),
        Term("first step", FIRST_STEP_BYTES, "traced step, graph, tf.data threads, measured", "baseline"),
        Term(
            "margin",
            math.ceil(config.margin * model_bytes),
            f"{config.margin:.0%} of the model's terms: fragmentation, kernel scratch, what is not modelled",
            "margin",
        ),
    ]
    return terms
