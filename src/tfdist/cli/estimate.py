"""``tfdist estimate``: will this training job fit? One replica's memory, term by term, against a device."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from tfdist.cli.argtypes import integer, number
from tfdist.errors import ConfigError

#: Input shape of a built-in workload when --input-shape is not given: the synthetic dataset's 28x28x1,
#: ImageNet's 224x224x3 for the ImageNet architectures.
WORKLOAD_SHAPES = {"resnet50": (224, 224, 3), "mobilenetv2": (224, 224, 3)}
DEFAULT_SHAPE = (28, 28, 1)


def register(sub: Any) -> None:
    """Add the ``estimate`` sub-parser."""
    from tfdist.workloads.models import NAMES

    p = sub.add_parser(
        "estimate",
        help="will a training job fit? memory per replica (weights, gradients, optimizer, activations) "
        "against a GPU or host RAM, before any queue wait",
    )
    p.add_argument(
        "model",
        nargs="?",
        help="SCRIPT.py:FUNCTION (a function that returns a Keras model, called with no arguments) or a "
        "saved FILE.keras; or use --workload",
    )
    p.add_argument("--workload", help=f"a built-in workload: {' | '.join(NAMES)}")
    p.add_argument(
        "--input-shape",
        help="one example's shape, e.g. 224,224,3: for --workload (default 28,28,1; 224,224,3 for resnet50 "
        "and mobilenetv2) and for subclassed models",
    )
    p.add_argument("--classes", type=integer, default=10, help="--workload: output classes (default 10)")
    p.add_argument(
        "--batch-size-per-replica",
        dest="batch_per_replica",
        type=integer,
        default=32,
        help="examples per replica per step (default 32)",
    )
    p.add_argument(
        "--optimizer",
        help="sgd | momentum | adam | adamw | rmsprop (default: the model's compiled optimizer, else adam)",
    )
    p.add_argument(
        "--mixed-precision",
        dest="precision",
        help="bf16 | fp16, as tfdist train takes it (or Keras' policy name: mixed_bfloat16 | mixed_float16); "
        "default float32",
    )
    p.add_argument(
        "--replicas", type=integer, default=1, help="replicas of the job (adds the all-reduce buffer)"
    )
    p.add_argument("--backend", default="tf", help="tf | mpi | horovod: how the replicas sum gradients")
    p.add_argument(
        "--device-memory",
        help="memory of one device, e.g. 80GB, 80GiB, 24576MiB (default: GPU 0 via NVML, else host RAM)",
    )
    p.add_argument(
        "--margin",
        type=number,
        help="added for what the estimate cannot know, as a fraction of the model's terms (default 0.1)",
    )
    p.add_argument("--json", dest="json_path", metavar="PATH", help="also write the estimate as JSON")
    p.add_argument("--format", default="table", help="table | json (json: the estimate on stdout)")
    p.set_defaults(run=run)


#: ``--mixed-precision``'s words (train's, and Keras' policy names) -> the estimate's precision policy.
PRECISION_WORDS = {"bf16": "mixed_bfloat16", "fp16": "mixed_float16"}
PRECISION_WORDS |= {word: word for word in ("mixed_bfloat16", "mixed_float16", "float32")}


def parse_shape(text: str) -> tuple[int, ...]:
    """An example's shape from ``--input-shape``.

    Input/Output: ``"224,224,3"`` -> ``(224, 224, 3)``; ``"784"`` -> ``(784,)``.
    """
    try:
        shape = tuple(int(part) for part in text.replace("x", ",").split(","))
    except ValueError:
        shape = ()
    if not shape or any(d < 1 for d in shape):
        raise ConfigError(f"--input-shape {text!r} is not a shape. Hint: positive sizes, e.g. 224,224,3.")
    return shape


def _check(args: argparse.Namespace) -> Any:
    """Every flag checked before TensorFlow loads: the config, the device, the output choices."""
    from tfdist import backends
    from tfdist.estimate.plan import DEFAULT_MARGIN, EstimateConfig, parse_size

    if (args.model is None) == (args.workload is None):
        raise ConfigError(
            "give one model: SCRIPT.py:FUNCTION, FILE.keras or --workload NAME. "
            "Hint: tfdist estimate train.py:build_model --batch-size-per-replica 64"
        )
    if args.format not in ("table", "json"):
        raise ConfigError(f"--format {args.format!r}; choose table or json.")
    if args.backend not in backends.NAMES:
        raise ConfigError(f"--backend {args.backend!r}; choose one of {', '.join(backends.NAMES)}.")
    if args.device_memory is not None:
        parse_size(args.device_memory)
    if args.json_path is not None and not os.path.isdir(os.path.dirname(os.path.abspath(args.json_path))):
        raise ConfigError(f"--json {args.json_path}: its folder does not exist.")
    margin = DEFAULT_MARGIN if args.margin is None else args.margin
    precision = PRECISION_WORDS.get(args.precision or "float32")
    if precision is None:
        raise ConfigError(f"--mixed-precision {args.precision!r}; choose bf16 or fp16 (default: float32).")
    return EstimateConfig(
        batch_per_replica=args.batch_per_replica,
        optimizer=args.optimizer,
        precision=precision,
        replicas=args.replicas,
        backend=args.backend,
        margin=margin,
    )


def _read_model(args: argparse.Namespace) -> Any:
    from tfdist.estimate import read

    shape = parse_shape(args.input_shape) if args.input_shape else None
    if args.workload is not None:
        if args.classes < 1:
            raise ConfigError(f"--classes {args.classes}: at least one class.")
        return read.from_workload(
            args.workload, shape or WORKLOAD_SHAPES.get(args.workload, DEFAULT_SHAPE), args.classes
        )
    if args.model.endswith(".keras"):
        return read.from_keras_file(args.model, shape)
    if ":" in args.model:
        return read.from_script(args.model, shape)
    raise ConfigError(f"{args.model!r} is neither SCRIPT.py:FUNCTION nor a .keras file.")


def _print_table(result: Any) -> None:
    from rich.console import Console
    from rich.table import Table

    from tfdist.estimate.result import MIB

    console = Console()
    table = Table(
        title=f"{result.model}: {result.params:,} parameters, {result.optimizer}, {result.precision}, "
        f"batch {result.batch_per_replica} per replica"
    )
    table.add_column("per replica")
    table.add_column("MiB", justify="right")
    table.add_column("how")
    for term in result.terms:
        style = "dim" if term.kind in ("baseline", "margin") else None
        table.add_row(term.name, f"{term.bytes / MIB:,.0f}", term.how, style=style)
    table.add_row("total", f"{result.total / MIB:,.0f}", "", style="bold")
    console.print(table)
    device = result.device
    if device is not None:
        shared = f" shared by {device.shared_by} replicas" if device.shared_by > 1 else ""
        verdict = "[green]fits[/]" if result.fits else "[red]does not fit[/]"
        console.print(
            f"{device.name}: {device.bytes / MIB:,.0f} MiB{shared}; "
            f"needs {result.needed / MIB:,.0f} MiB: {verdict}",
            highlight=False,
        )
    for note in result.notes:
        console.print(f"note: {note}", highlight=False)


def run(args: argparse.Namespace) -> int:
    """Check the flags, read the model without its weights, estimate, print and optionally write JSON."""
    from tfdist.estimate.device import find_device
    from tfdist.estimate.plan import estimate
    from tfdist.files import write_json

    config = _check(args)
    if args.workload is None and ":" in args.model and not args.model.endswith(".keras"):
        from tfdist.estimate.read import check_script

        check_script(args.model)  # a typo named before TensorFlow loads
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    device = find_device(args.device_memory, config.replicas)
    summary = _read_model(args)
    result = estimate(summary, config, device)
    if args.json_path is not None:
        write_json(args.json_path, result.to_dict(), indent=2)
    if args.format == "json":
        json.dump(result.to_dict(), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        _print_table(result)
    return 0 if result.fits is not False else 1
