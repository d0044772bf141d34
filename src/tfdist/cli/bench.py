"""``tfdist bench``: measure scaling across workers, replicas and backends; optionally name the bottleneck."""

from __future__ import annotations

import argparse
import os
from typing import Any

from tfdist.cli.argtypes import integer, number, seconds


def register(sub: Any) -> None:
    """Add the ``bench`` sub-parser."""
    p = sub.add_parser("bench", help="scaling table, plot and bottleneck diagnosis from real runs")
    p.add_argument(
        "--workload",
        default="mnist-cnn",
        help="regression | mnist-cnn | resnet50 | mobilenetv2 | big-gradient",
    )
    p.add_argument(
        "--dataset", default="synthetic", help="synthetic | digits | tfds:NAME | folder:PATH | tfrecord:GLOB"
    )
    p.add_argument("--workers", default="1,2", help="comma-separated worker (process) counts, e.g. 1,2,4")
    p.add_argument(
        "--replicas", default="1", help="replicas per worker: GPUs, or logical CPU devices without GPUs"
    )
    p.add_argument("--backend", default="tf", help="synchronisation backends to compare: tf, mpi or tf,mpi")
    p.add_argument(
        "--compare",
        default="independent",
        help="reference configurations run beside the backends: independent (N unsynchronised copies: the "
        "limit), raw-tf (the hand-written MultiWorkerMirroredStrategy loop), keras-fit (unmodified "
        "model.fit); a comma-separated list, all or none",
    )
    p.add_argument("--steps", type=integer, default=50, help="measured steps per run")
    p.add_argument("--warmup", type=integer, default=10, help="steps run before measuring (tracing, caches)")
    p.add_argument("--repeats", type=integer, default=3, help="runs of every configuration, alternating")
    p.add_argument("--batch-size-per-replica", type=integer, default=64)
    p.add_argument(
        "--threads",
        type=integer,
        default=None,
        help="intra/inter-op threads per worker (default: cores / max workers)",
    )
    p.add_argument(
        "--diagnose",
        action="store_true",
        help="also measure input, compute and all-reduce alone and name the bottleneck",
    )
    p.add_argument(
        "--input-delay-ms",
        type=number,
        default=0.0,
        help="add this much time to every input batch (to see an input-bound job)",
    )
    p.add_argument("--run-timeout", type=seconds, default=600.0, help="limit per measured run, in seconds")
    p.add_argument("--seed", type=integer, default=0)
    p.add_argument("--out", default=None, help="results directory (default ./tfdist-bench/<run-id>)")
    p.set_defaults(run=run)


def config_from_args(args: argparse.Namespace) -> Any:
    """Validated BenchConfig from parsed flags."""
    from tfdist.bench.config import BenchConfig, parse_backends, parse_compare, parse_counts
    from tfdist.launch.api import new_run_id

    return BenchConfig(
        out=args.out or os.path.join("tfdist-bench", new_run_id()),
        workload=args.workload,
        dataset=args.dataset,
        workers=parse_counts(args.workers, "--workers"),
        replicas=parse_counts(args.replicas, "--replicas"),
        backends=parse_backends(args.backend),
        compare=parse_compare(args.compare),
        steps=args.steps,
        warmup=args.warmup,
        repeats=args.repeats,
        batch_size_per_replica=args.batch_size_per_replica,
        threads=args.threads,
        diagnose=args.diagnose,
        input_delay_ms=args.input_delay_ms,
        run_timeout=args.run_timeout,
        seed=args.seed,
    )


def run(args: argparse.Namespace) -> int:
    """Run the benchmark; exit 1 (with the failing run's log) when a run fails."""
    import sys

    from tfdist.bench.api import Bench
    from tfdist.bench.report import print_table

    config = config_from_args(args)
    bench = Bench(config, say=lambda line: print(f"tfdist bench: {line}", flush=True))
    for warning in bench.plan.warnings:
        print(f"tfdist bench: warning: {warning}", file=sys.stderr, flush=True)
    payload = bench.run()
    print_table(payload)
    print(
        f"tfdist bench: results in {os.path.abspath(config.out)} (results.json, results.csv, report.md, "
        "scaling.png)"
    )
    return 0
