"""The body of ``tfdist train`` in each worker (strategy, data, model, fit, summary, saved model), and
``python -m tfdist.workloads.job CONFIG.json``: what ``tfdist train --workers N`` starts in each worker."""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from typing import Any

from tfdist.errors import ConfigError
from tfdist.worker.contract import RunFiles
from tfdist.workloads.config import TrainConfig


@dataclass
class Prepared:
    """Everything a run needs, built under the detected environment's strategy."""

    strategy: Any
    model: Any
    data: Any
    train_data: Any
    steps_per_epoch: int | None
    global_batch: int


def prepare(config: TrainConfig) -> Prepared:
    """Strategy, data and compiled model for ``config`` (shared by ``tfdist train`` and ``tfdist bench``)."""
    import tfdist

    strategy = tfdist.strategy()
    import keras

    from tfdist.workloads import datasets, models

    data = datasets.load(
        config.dataset, seed=config.seed, data_dir=config.data_dir, image_size=config.image_size
    )
    if config.mixed_precision:
        keras.mixed_precision.set_global_policy(
            "mixed_bfloat16" if config.mixed_precision == "bf16" else "mixed_float16"
        )
    keras.utils.set_random_seed(config.seed)
    with strategy.scope():
        model = models.build(config.workload, data.input_shape, data.num_classes, config.weights)
        adam = config.optimizer == "adam"
        optimizer = (
            keras.optimizers.Adam(config.lr) if adam else keras.optimizers.SGD(config.lr, momentum=0.9)
        )
        if config.mixed_precision == "fp16":
            optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
        if config.workload == "regression":  # one output unit: fit the label value itself
            model.compile(optimizer=optimizer, loss="mse", metrics=["mae"])
        else:
            model.compile(optimizer=optimizer, loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    replicas = tfdist.num_replicas(strategy)
    global_batch = config.global_batch_size or config.batch_size_per_replica * replicas
    if global_batch % replicas:
        lower = max(replicas, global_batch - global_batch % replicas)
        raise ConfigError(
            f"--global-batch-size={global_batch} is not divisible by the {replicas} replicas of this job; "
            f"use {lower} or {lower + replicas}."
        )
    steps = config.steps_per_epoch
    if isinstance(data, datasets.StreamDataset):
        train_data: Any = data.dataset_fn(global_batch, config.seed)
        steps = steps or max(1, data.train_examples // global_batch)
    else:
        train_data = (data.x_train, data.y_train)
    return Prepared(strategy, model, data, train_data, steps, global_batch)


def run_training(config: TrainConfig) -> dict[str, Any]:
    """Train as configured under the detected environment; return the summary (same on every worker)."""
    import tfdist
    from tfdist.train import fit

    started = time.monotonic()
    p = prepare(config)
    model, data = p.model, p.data
    history = fit(
        model,
        p.train_data,
        batch_size=p.global_batch,
        epochs=config.epochs,
        steps_per_epoch=p.steps_per_epoch,
        validation_data=(data.x_test, data.y_test),
        checkpoint_dir=config.checkpoint_dir,
        checkpoint_every=config.checkpoint_every,
        lr_scaling=config.lr_scaling,
        warmup_epochs=config.warmup_epochs,
        seed=config.seed,
        run_dir=config.run_dir,
        tensorboard_dir=RunFiles(config.run_dir).tensorboard,
        jit_compile=config.xla,
        on_nan=config.on_nan,
    )
    model_path = RunFiles(config.run_dir).model
    tfdist.save_model(model, model_path)
    summary = {
        **history.summary,
        "test_accuracy": history.history.get("val_accuracy", [float("nan")])[-1],
        "test_mae": history.history.get("val_mae", [float("nan")])[-1],
        "test_loss": history.history.get("val_loss", [float("nan")])[-1],
        "wall_s": time.monotonic() - started,
        "run_dir": os.path.abspath(config.run_dir),
        "model": model_path,
    }
    if tfdist.is_chief():
        _print_summary(summary)
    return summary


def _print_summary(summary: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="tfdist train: summary", show_header=False)
    rows = [
        ("test accuracy", f"{summary['test_accuracy']:.4f}")
        if summary["test_accuracy"] == summary["test_accuracy"]  # NaN for the regression workload
        else ("test MAE", f"{summary['test_mae']:.4f}"),
        ("test loss", f"{summary['test_loss']:.4f}"),
        (
            "strategy",
            f"{summary['strategy']} · {summary['world_size']} worker(s) · {summary['replicas']} replica(s)",
        ),
        ("global batch", str(summary["global_batch"])),
        ("steps", str(summary["steps"])),
        ("training time", f"{summary['duration_s']:.1f} s (wall {summary['wall_s']:.1f} s)"),
        ("throughput", f"{summary['examples_per_sec']:,.0f} examples/s"),
        ("run directory", summary["run_dir"]),
    ]
    for key, value in rows:
        table.add_row(key, value)
    Console(width=110).print(table)


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m tfdist.workloads.job CONFIG.json``."""
    args = sys.argv[1:] if argv is None else argv
    try:
        if len(args) != 1:
            raise ConfigError(
                "usage: python -m tfdist.workloads.job CONFIG.json (written by tfdist train --workers)."
            )
        with open(args[0], encoding="utf-8") as fh:
            config = TrainConfig.from_json(fh.read(), where=args[0])
    except (ConfigError, OSError) as exc:
        sys.stderr.write(f"tfdist train: error: {exc}\n")
        return 2
    run_training(config)
    return 0


if __name__ == "__main__":
    sys.exit(main())
