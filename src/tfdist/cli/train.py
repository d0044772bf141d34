"""``tfdist train``: train a named workload on a named dataset, here or on N local workers."""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import fields, replace
from typing import Any

from tfdist import files
from tfdist.cli import examples
from tfdist.cli.argtypes import add_run_dir, integer, number
from tfdist.errors import ConfigError
from tfdist.worker.contract import RunFiles


def register(sub: Any) -> None:
    """Add the ``train`` sub-parser."""
    from tfdist.workloads.models import NAMES

    p = sub.add_parser(
        "train",
        help="train a workload (default: mnist-cnn on the embedded digits data)",
        **examples(
            "tfdist train --epochs 1                          # mnist-cnn on the embedded digits, here",
            "tfdist train --workers 2 --workload regression   # 2 workers on this machine",
        ),
    )
    p.add_argument("--workload", default="mnist-cnn", help=" | ".join(NAMES))
    p.add_argument(
        "--dataset",
        default="digits",
        help="digits (embedded) | synthetic | tfds:NAME | folder:PATH | tfrecord:GLOB",
    )
    p.add_argument(
        "--data-dir", help="where tfds:NAME was prepared (default $TFDS_DATA_DIR or ~/tensorflow_datasets)"
    )
    p.add_argument(
        "--image-size",
        type=integer,
        default=64,
        metavar="SIZE",
        help="folder: images are resized to SIZE x SIZE",
    )
    p.add_argument("--epochs", type=integer, default=5, metavar="N", help="default 5")
    p.add_argument(
        "--batch-size-per-replica",
        type=integer,
        metavar="N",
        help="examples per replica per step (default 32)",
    )
    p.add_argument(
        "--global-batch-size",
        type=integer,
        metavar="N",
        help="the job's batch whatever the replica count (each replica gets its share): the same "
        "training on 1 process or 4 nodes",
    )
    p.add_argument("--lr", type=number, default=0.05, help="base learning rate (before --lr-scaling)")
    p.add_argument("--optimizer", default="sgd", help="sgd (momentum 0.9) | adam")
    p.add_argument(
        "--lr-scaling", default="none", help="linear | sqrt | none: scale the LR with the replicas"
    )
    p.add_argument(
        "--warmup-epochs",
        type=number,
        default=0.0,
        metavar="EPOCHS",
        help="epochs of linear LR warm-up (default 0)",
    )
    add_run_dir(p, "run_dir", "logs, checkpoints, history")
    p.add_argument("--resume", action="store_true", help="continue from the checkpoints in --run-dir")
    p.add_argument(
        "--checkpoint-every", type=integer, metavar="STEPS", help="also checkpoint every STEPS steps"
    )
    p.add_argument("--steps-per-epoch", type=integer, metavar="STEPS", help="default: the whole dataset")
    p.add_argument("--seed", type=integer, default=0)
    p.add_argument("--xla", action="store_true", help="compile the train step with XLA")
    p.add_argument("--mixed-precision", help="bf16 | fp16")
    p.add_argument("--weights", help="local weights file for resnet50 / mobilenetv2")
    p.add_argument(
        "--on-nan", default="stop", help="stop (default: end the run at a NaN/inf loss) | continue"
    )
    p.add_argument(
        "--workers",
        type=integer,
        metavar="N",
        help="start N workers on this machine (default: the job this process is part of, e.g. a Slurm step)",
    )
    p.add_argument(
        "--backend",
        help="with --workers: tf | mpi (one packed all-reduce per step); default: mpi on CPU when mpi4py and "
        "an MPI launcher are installed, tf otherwise",
    )
    p.add_argument(
        "--max-restarts",
        type=integer,
        default=0,
        metavar="K",
        help="with --workers: restarts after a failure (default 0)",
    )
    p.add_argument(
        "--compression",
        help="with --backend mpi: gradients across nodes as none | fp16 | bf16 (16-bit: lossy, half the "
        "bytes; default TFDIST_COMPRESSION)",
    )
    p.add_argument(
        "--bucket-mb",
        help="with --backend mpi: gradient bucket size in MB, each summed while the backward pass goes on "
        "(0: one sum after it; default TFDIST_BUCKET_MB)",
    )
    p.add_argument(
        "--shard-optimizer",
        action="store_true",
        help="with --workers N --backend mpi: each worker keeps the optimizer's slots of 1/N of the weights "
        "(ZeRO-1; with buckets also the gradients, ZeRO-2); checkpoints stay whole",
    )
    p.set_defaults(run=run)


def config_from_args(args: argparse.Namespace) -> Any:
    """Validated TrainConfig from parsed flags (each flag named as the config's field)."""
    from tfdist.launcher.outcome import new_run_id
    from tfdist.workloads.config import TrainConfig

    values = {f.name: getattr(args, f.name) for f in fields(TrainConfig)}
    if args.batch_size_per_replica is None:
        values["batch_size_per_replica"] = 32
    values["run_dir"] = args.run_dir or os.path.join("tfdist-runs", new_run_id())
    return TrainConfig(**values)


def run(args: argparse.Namespace) -> int:
    """Validate, then train here or launch ``--workers`` local workers running this same command."""
    from tfdist.workloads.preflight import preflight

    if args.global_batch_size is not None and args.batch_size_per_replica is not None:
        raise ConfigError(
            "--global-batch-size and --batch-size-per-replica both given; choose one (the global batch is "
            "the per-replica batch times the replicas)."
        )
    config = config_from_args(args)
    wire_env(args, args.backend if args.workers is not None else "tf")  # bad values fail before anything
    preflight(config)
    if args.workers is None and args.backend not in (None, "tf"):
        raise ConfigError(
            f"--backend {args.backend} needs --workers N (it picks how the workers synchronise)."
        )
    if args.workers is None:
        from tfdist.workloads.job import run_training

        run_training(config)
        return 0
    if args.workers < 1:
        raise ConfigError(f"--workers={args.workers} must be at least 1.")
    from tfdist.launcher import LaunchConfig, launch
    from tfdist.nodes import visible_gpus

    gpus = len(visible_gpus(os.environ))
    if config.global_batch_size and not gpus and config.global_batch_size % args.workers:
        raise ConfigError(
            f"--global-batch-size={config.global_batch_size} is not divisible by --workers={args.workers} "
            "(one replica each on CPU). Hint: a multiple of the worker count."
        )
    backend = _backend(args.backend, args.workers, gpus)
    launch_config = LaunchConfig(
        nproc_per_node=args.workers,
        cpu=not gpus,
        quiet_workers=True,
        prefix=False,
        max_restarts=args.max_restarts,
        run_dir=RunFiles(config.run_dir).launch_dir,
        backend=backend,
        extra_env=wire_env(args, backend),
    )
    from tfdist.launcher.preflight import preflight as launch_preflight

    launch_preflight(launch_config)  # refused here, before the run directory is made
    # resume=True for the workers: the run directory is new or the user asked to resume, and a restarted
    # attempt must continue from the checkpoints the failed one wrote.
    os.makedirs(config.run_dir, exist_ok=True)
    config_path = RunFiles(config.run_dir).train_config
    files.write_text(config_path, replace(config, resume=True).to_json())
    return launch(launch_config, ["-m", "tfdist.workloads.job", config_path]).exit_code


def wire_env(args: argparse.Namespace, backend: str | None) -> dict[str, str]:
    """``--compression`` / ``--bucket-mb`` / ``--shard-optimizer`` as the workers' TFDIST_* variables;
    ConfigError for a bad value or a backend other than mpi (``None``: not chosen yet)."""
    from tfdist.sync.wire import check_bucket_setting, check_compression

    env = {}
    why = "no --workers were given" if args.workers is None else f"the backend is {backend}"
    if args.compression is not None:
        env["TFDIST_COMPRESSION"] = check_compression(args.compression, "--compression")
    if args.bucket_mb is not None:
        setting = check_bucket_setting(args.bucket_mb, "--bucket-mb")
        env["TFDIST_BUCKET_MB"] = setting if isinstance(setting, str) else f"{setting:g}"
    mpi, bucket = backend in (None, "mpi"), env.get("TFDIST_BUCKET_MB", "0")
    if not mpi and (env.get("TFDIST_COMPRESSION", "none") != "none" or bucket not in ("0", "auto")):
        raise ConfigError(
            f"--compression/--bucket-mb set how the mpi backend sums gradients, but {why}. Hint: add "
            "--workers N --backend mpi."
        )
    if args.shard_optimizer:
        if args.workers is None or not mpi:
            raise ConfigError(
                f"--shard-optimizer splits the optimizer's slots between mpi workers, but {why}. Hint: add "
                "--workers N --backend mpi, or leave --shard-optimizer out."
            )
        env["TFDIST_SHARD_OPTIMIZER"] = "1"
    return env


def _backend(requested: str | None, workers: int, gpus: int) -> str:
    """The backend of ``--workers N``: ``--backend``, else TFDIST_BACKEND, else the fastest this machine
    runs (:func:`tfdist.backends.choose`), said in one line."""
    from tfdist import backends, variables
    from tfdist.mpi.probe import mpi_ready

    choice = backends.choose(
        requested or str(variables.get("TFDIST_BACKEND")),
        source="--backend" if requested else "TFDIST_BACKEND",
        own_strategy=False,
        workers=workers,
        gpus=gpus,
        mpi_ready=mpi_ready,
    )
    if choice.reason:
        sys.stderr.write(f"tfdist train: backend {choice.name}: {choice.reason}.\n")
    return choice.name
