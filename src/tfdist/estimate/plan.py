"""Will this job fit? The memory of one training replica, as arithmetic on a model's shapes (pure: no
TensorFlow, no Keras; :mod:`tfdist.estimate.read` turns a Keras model into a :class:`ModelSummary`).

One replica holds, for the whole step: the weights, their gradients, the optimizer's slot variables, the
activations that backprop keeps (every layer output, times the batch), a few input batches, and for more
than one replica one packed copy of the gradients for the all-reduce. Beside these the step needs short-
lived workspace: the optimizer's update temporaries (a few copies of the largest variable), the gradient
in flight through the largest activation, and a fixed cost per batch-norm layer (measured). The process
itself costs a fixed baseline (TensorFlow + Keras loaded, the step traced), measured here and stated as a
constant. What nothing here can know (allocator fragmentation, cuDNN / oneDNN scratch, XLA's buffers) is a
margin, printed as its own line.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tfdist.errors import ConfigError

MIB = 2**20
OPTIMIZERS = ("sgd", "momentum", "adam", "adamw", "rmsprop")
PRECISIONS = ("float32", "mixed_float16", "mixed_bfloat16")
#: Bytes of one activation element under each precision policy (its compute dtype). Keras 3's mixed
#: policies keep the variables, and so the gradients and the optimizer slots, in float32: the optimizer
#: slots are ``add_variable_from_reference(var)`` with the variable's dtype (keras/src/optimizers).
COMPUTE_BYTES = {"float32": 4, "mixed_float16": 2, "mixed_bfloat16": 2}
#: Slot variables per trainable variable, as Keras 3.15 builds them (keras/src/optimizers/*.py ``build``):
#: SGD none (momentum=0) or one ``momentum``; Adam and AdamW ``momentum`` + ``velocity`` (+ ``velocity_hat``
#: with amsgrad); RMSprop ``velocity`` (+ ``momentum`` when momentum > 0, + ``average_gradient`` when
#: centered). Every optimizer also holds two scalars: ``iterations`` (int64) and ``learning_rate``.
BASE_SLOTS = {"sgd": 0, "momentum": 1, "adam": 2, "adamw": 2, "rmsprop": 1}
#: Temporaries of one variable's update, in copies of that variable. The updates are chains of elementwise
#: ops (Adam's ``(g - m) * (1 - beta_1)``, ``sqrt(v) + eps`` ...) and TensorFlow's elementwise kernels write
#: into an input's buffer when nothing else holds it, so a chain costs about one new buffer at a time.
UPDATE_TEMPORARIES = 1
#: Idle TensorFlow 2.21 + Keras 3.15 process (imported, nothing built), resident memory on Linux x86-64,
#: CPU only: 646 MiB measured by ``benchmarks/estimate_accuracy.py`` (its ``idle_mib``).
IDLE_PROCESS_BYTES = 646 * MIB
#: What the first ``model.fit`` step adds to an idle process whatever the model (tracing the step function,
#: the graph and its optimiser passes, the data pipeline's threads): 150 MiB on the same machine, the
#: intercept of measured peak minus the model's own terms across the models of estimate_accuracy.py.
FIRST_STEP_BYTES = 150 * MIB
#: Input batches alive at once: the one in the step and tf.data's prefetched ones.
INPUT_BATCHES = 3
#: Layers whose output backprop does not keep a copy of: views of their input (Flatten, Reshape), the
#: input itself (counted as input batches); and those that keep two (Dropout: output and its mask).
KEPT_COPIES = {"InputLayer": 0, "Flatten": 0, "Reshape": 0, "Permute": 1, "Dropout": 2}
#: Per batch-normalization layer, whatever the batch and the image size (TF 2.21 on CPU, oneDNN off): 8 MiB.
#: Measured by benchmarks/estimate_accuracy.py --conv (results/estimate_conv.json: peak memory of model.fit
#: against the other terms). What they leave unexplained grows by 8.1 MiB per block between stacks of 8 and
#: 32 conv + batch-norm + ReLU blocks (32x32x32 activations, batch 8) and is 378-438 MiB for ResNet-50's 53
#: batch-norm layers (7-8 MiB each) at batch 2, 8 and 24 and at 32 and 64 px alike; 32 conv + ReLU blocks
#: without batch norm leave -11 MiB, 33 dense layers +8 MiB. So it is neither the convolutions' im2col
#: workspace nor the backward pass's copies of activations (both would grow with the batch or the image):
#: it is a fixed cost of each Keras batch-norm layer's step (its moments, two moving-average updates and
#: their gradients, unfused on this backend).
BATCH_NORM_BYTES = 8 * MIB
#: The Keras layer classes that term counts.
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
    """What the estimate needs of a model, read without its weights' values.

    ``trainable`` holds the element count of each trainable variable, ``variable_bytes`` the bytes of one
    element (4 for float32 variables, also under the mixed policies), ``layers`` the layer outputs in call
    order, ``optimizer`` the compiled optimizer's name and slot count if the model has one.
    """

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


@dataclass(frozen=True)
class Device:
    """The memory one replica is compared against: ``name`` says what it is (a GPU, host RAM, a flag)."""

    name: str
    bytes: int
    #: Replicas that share it: a GPU holds one, host RAM holds every replica of the machine.
    shared_by: int = 1


@dataclass(frozen=True)
class Term:
    """One line of the estimate: what, how many bytes, how it was worked out."""

    name: str
    bytes: int
    how: str
    kind: str = "model"  # model | workspace | baseline | margin


@dataclass(frozen=True)
class MemoryEstimate:
    """The estimate of one replica: its terms (the margin last), total, and the device compared."""

    model: str
    params: int
    optimizer: str
    slots: int
    precision: str
    batch_per_replica: int
    replicas: int
    terms: tuple[Term, ...]
    device: Device | None = None
    notes: tuple[str, ...] = field(default=())
    #: Whether ``terms`` are those of a sharded optimizer (slots / replicas).
    shard_optimizer: bool = False
    #: One replica's total in the other mode (sharded when these terms are not, and the reverse); None
    #: when sharding changes nothing (one replica, or an optimizer without slots).
    other_total: int | None = None

    @property
    def total(self) -> int:
        """Bytes of one replica, margin included."""
        return sum(t.bytes for t in self.terms)

    @property
    def needed(self) -> int:
        """Bytes the device must hold: one replica's total, times the replicas that share the device."""
        return self.total * (self.device.shared_by if self.device else 1)

    @property
    def fits(self) -> bool | None:
        """Whether the replicas that share the device fit in it; None without a device."""
        return None if self.device is None else self.needed <= self.device.bytes

    @property
    def sharded_total(self) -> int | None:
        """One replica's bytes with the optimizer sharded (None when that was not worked out)."""
        return self.total if self.shard_optimizer else self.other_total

    @property
    def unsharded_total(self) -> int:
        """One replica's bytes with every slot on every replica."""
        return self.other_total if self.shard_optimizer and self.other_total is not None else self.total

    @property
    def sharding_makes_it_fit(self) -> bool:
        """Whether the job fits the device sharded and does not unsharded."""
        if self.device is None or self.sharded_total is None:
            return False
        room = self.device.bytes // self.device.shared_by
        return self.sharded_total <= room < self.unsharded_total

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: every term in bytes and MiB, the total, the device and the verdict."""
        return {
            "model": self.model,
            "params": self.params,
            "optimizer": self.optimizer,
            "optimizer_slots": self.slots,
            "precision": self.precision,
            "batch_per_replica": self.batch_per_replica,
            "replicas": self.replicas,
            "terms": [
                {
                    "name": t.name,
                    "kind": t.kind,
                    "bytes": t.bytes,
                    "mib": round(t.bytes / MIB, 1),
                    "how": t.how,
                }
                for t in self.terms
            ],
            "total_bytes": self.total,
            "total_mib": round(self.total / MIB, 1),
            "device": None
            if self.device is None
            else {"name": self.device.name, "bytes": self.device.bytes, "shared_by": self.device.shared_by},
            "needed_bytes": self.needed,
            "fits": self.fits,
            "shard_optimizer": self.shard_optimizer,
            "unsharded_total_bytes": self.unsharded_total,
            "sharded_total_bytes": self.sharded_total,
            "sharding_makes_it_fit": self.sharding_makes_it_fit,
            "notes": list(self.notes),
        }


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
    """Per-example elements that backprop keeps: each layer's output once (the next layer's gradient
    needs it), none for views and the input, two for Dropout (output and mask)."""
    return sum(layer.elements * KEPT_COPIES.get(layer.kind, 1) for layer in layers)


def estimate(model: ModelSummary, config: EstimateConfig, device: Device | None = None) -> MemoryEstimate:
    """The memory of one replica of ``model`` trained as ``config`` says, against ``device``; with more
    than one replica and an optimizer with slots, also the total in the other sharding mode and a note
    saying what sharding the optimizer (ZeRO stage 1) changes."""
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


def sharding_note(result: MemoryEstimate) -> str:
    """One line: each replica's memory sharded against unsharded, and whether sharding is what fits."""
    sharded, unsharded = result.sharded_total or 0, result.unsharded_total
    line = (
        f"optimizer slots sharded over {result.replicas} replicas (tfdist.fit(shard_optimizer=True), "
        f"--backend mpi): {sharded / MIB:,.0f} MiB per replica, unsharded {unsharded / MIB:,.0f} MiB"
    )
    if result.sharding_makes_it_fit:
        return line + "; sharding the optimizer is what makes this job fit."
    return line + "."


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
        # The flat gradients sent and the weights gathered are never alive together: sharded Adam's training
        # peak was 390 MiB under unsharded on 2 ranks (384 MiB of slots saved) and 937 MiB on 4 (576), 100.7M
        # parameters (benchmarks/results/shard_optimizer.json).
        how = "one packed copy: the gradients reduce-scattered, then the weights all-gathered"
        terms.append(Term("reduce-scatter / all-gather buffer", trainable * vb, how, "workspace"))
    elif config.replicas > 1:
        terms.append(
            Term("all-reduce buffer", trainable * vb, "one packed copy of the gradients", "workspace")
        )
    temporaries = UPDATE_TEMPORARIES
    terms += [
        Term(
            "optimizer update",
            temporaries * largest_var * vb,
            f"{temporaries} temporary the size of the largest variable ({largest_var:,})",
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
