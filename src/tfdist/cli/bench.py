"""``tfdist bench``: measure scaling across workers, replicas and backends; optionally name the bottleneck."""

from __future__ import annotations

import argparse
import os
from typing import Any

from tfdist.cli import examples
from tfdist.cli.argtypes import integer, number, seconds
from tfdist.errors import ConfigError


def register(sub: Any) -> None:
    """Add the ``bench`` sub-parser."""
    p = sub.add_parser(
        "bench",
        help="scaling table, plot and bottleneck diagnosis from real runs",
        **examples(
            "tfdist bench --workers 1,2                    # 1 and 2 workers, beside unsynchronised copies",
            "tfdist bench --backend tf,mpi --diagnose      # two backends compared, the bottleneck named",
        ),
    )
    p.add_argument(
        "--workload",
        default="mnist-cnn",
        help="regression | mnist-cnn | resnet50 | mobilenetv2 | big-gradient",
    )
    p.add_argument(
        "--dataset", default="synthetic", help="synthetic | digits | tfds:NAME | folder:PATH | tfrecord:GLOB"
    )
    p.add_argument(
        "--workers",
        metavar="N,N",
        help="worker processes per node to measure, comma-separated, e.g. 1,2,4 (default: 1,2 on this "
        "machine, 1 with --hosts or --nodes)",
    )
    p.add_argument(
        "--oversubscribe",
        action="store_true",
        help="measure more workers than this machine's CPU cores (refused otherwise: they would time-slice "
        "the cores, and the table would measure that, not scaling)",
    )
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
    p.add_argument(
        "--steps", type=integer, default=50, metavar="N", help="measured steps per run (default 50)"
    )
    p.add_argument(
        "--warmup",
        type=integer,
        metavar="STEPS",
        help="steps run before measuring (default 10; 20 across nodes on the MPI backend with auto buckets, "
        "whose decision and second trace then fall in the warm-up)",
    )
    p.add_argument(
        "--repeats",
        type=integer,
        default=3,
        metavar="N",
        help="runs of every configuration, alternated (default 3)",
    )
    p.add_argument("--batch-size-per-replica", type=integer, default=64)
    p.add_argument(
        "--threads", type=integer, help="intra/inter-op threads per worker (default: cores / max workers)"
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
        metavar="MS",
        help="add this much time to every input batch (to see an input-bound job)",
    )
    p.add_argument(
        "--run-timeout",
        type=seconds,
        default=600.0,
        metavar="SECONDS",
        help="limit per measured run (default 600)",
    )
    p.add_argument("--seed", type=integer, default=0)
    p.add_argument("--out", help="results directory (default ./tfdist-bench/<run-id>)")
    p.add_argument(
        "--hosts",
        help="run across these nodes (comma-separated, in node order; the grid's node counts take the first "
        "N); inside a Slurm allocation the default is the allocation's nodes when --nodes is given",
    )
    p.add_argument("--nodes", help="node counts to measure, e.g. 1,2 (default 1 and all hosts)")
    p.add_argument(
        "--on-host",
        help="command prefix that runs a command on a node, {host} replaced, e.g. 'ssh {host}' (default "
        "under Slurm: srun one task on that node; otherwise none: the hosts must be this machine's own "
        "network namespaces or reach each other from here)",
    )
    p.add_argument(
        "--base-port", type=integer, default=29600, help="first port of the runs across nodes (rotated)"
    )
    p.add_argument(
        "--cpus-per-host",
        type=integer,
        metavar="N",
        help="run each node's processes on N of its cores (node i takes its i-th group of N), as on nodes "
        "whose cores all compute; the default thread count follows (default: every core)",
    )
    p.add_argument(
        "--timeline",
        action="store_true",
        help="write a Chrome trace per rank of every measured tfdist run (runs/<run>/timeline/)",
    )
    p.add_argument(
        "--compression",
        default="none",
        help="the mpi backend's gradients across nodes: none, fp16, bf16 (lossy), or a comma-separated "
        "list to compare",
    )
    p.add_argument(
        "--bucket-mb",
        help="the mpi backend's gradient bucket sizes in MB to compare, e.g. 0,4 (0: one sum after the "
        "backward pass; default TFDIST_BUCKET_MB)",
    )
    p.set_defaults(run=run)


def config_from_args(args: argparse.Namespace) -> Any:
    """Validated BenchConfig from parsed flags."""
    from tfdist.bench.api import machine
    from tfdist.bench.config import (
        BenchConfig,
        parse_backends,
        parse_bucket_sizes,
        parse_compare,
        parse_compressions,
        parse_counts,
    )
    from tfdist.bench.nodes import resolve_nodes
    from tfdist.launcher.outcome import new_run_id

    nodes = parse_counts(args.nodes, "--nodes") if args.nodes else ()
    hosts, on_host = resolve_nodes(args.hosts, nodes, args.on_host, os.environ)
    workers = parse_counts(
        args.workers if args.workers is not None else ("1" if hosts else "1,2"), "--workers"
    )
    # Counts typed for this machine only: across nodes the workers run on the hosts' cores.
    if args.workers is not None and not hosts and not args.oversubscribe:
        _check_cores(args.workers, workers, machine()["cores"])
    return BenchConfig(
        out=args.out or os.path.join("tfdist-bench", new_run_id()),
        workload=args.workload,
        dataset=args.dataset,
        workers=workers,
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
        hosts=hosts,
        nodes=nodes,
        on_host=on_host,
        base_port=args.base_port,
        timeline=args.timeline,
        cpus_per_host=args.cpus_per_host,
        compression=parse_compressions(args.compression),
        bucket_mb=parse_bucket_sizes(args.bucket_mb) if args.bucket_mb is not None else (),
    )


def _check_cores(typed: str, workers: tuple[int, ...], cores: int) -> None:
    """Refuse more worker processes than this machine's cores (``--oversubscribe`` asks for them)."""
    if max(workers) <= cores:
        return
    fitting = ",".join(str(w) for w in sorted({w for w in workers if w <= cores} | {cores}))
    raise ConfigError(
        f"--workers {typed} asks for {max(workers)} worker processes on this machine's {cores} CPU cores: "
        "they would time-slice the cores, so the table would measure oversubscription, not scaling. "
        f"Hint: --workers {fitting}, or add --oversubscribe to measure it anyway."
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
