"""``tfdist launch``: parse flags into a LaunchConfig and run it."""

from __future__ import annotations

import argparse
import os
from typing import Any

from tfdist import nodes
from tfdist.cli import examples
from tfdist.cli.argtypes import add_run_dir, integer, seconds, seconds_or_off
from tfdist.errors import ConfigError
from tfdist.launcher.config import BIND_CHOICES, RAY_STRATEGY_CHOICES


def seconds_or_never(text: str) -> float | None:
    """``--grow-every``: seconds, or ``never`` (None)."""
    if text.strip().lower() == "never":
        return None
    try:
        return seconds(text)
    except argparse.ArgumentTypeError as exc:
        raise argparse.ArgumentTypeError(f"{exc} (or never)") from None


def register(sub: Any) -> None:
    """Add the ``launch`` sub-parser."""
    p = sub.add_parser(
        "launch",
        help="start N distributed TensorFlow workers running a script",
        description="tfdist launch [options] SCRIPT.py [args...] | -m MODULE [args...]",
        **examples(
            "tfdist launch -n 2 --cpu train.py --epochs 3          # 2 CPU workers; --epochs 3 is train.py's",
            "tfdist launch --nnodes 2 --rdzv node1:29400 train.py  # the same on node2: they meet at node1",
        ),
    )
    workers = p.add_argument_group("workers on this machine")
    workers.add_argument(
        "-n",
        "--nproc-per-node",
        type=integer,
        metavar="N",
        help="workers on this node (default: one per local GPU, else 1); with --ray: workers in all",
    )
    workers.add_argument(
        "--cpu", action="store_true", help="CPU workers with an equal share of the cores each"
    )
    workers.add_argument(
        "--gpus-per-worker",
        choices=("1", "all"),
        help="1: one GPU per worker (default); all: one worker drives every GPU of its node. On Ray a "
        "worker's GPUs are --ray-gpus G",
    )
    ray = p.add_argument_group("Ray: the workers placed by a Ray cluster")
    ray.add_argument(
        "--ray",
        action="store_const",
        const="auto",
        help="place the -n workers with Ray, on the cluster that RAY_ADDRESS names (else a Ray on this "
        "machine)",
    )
    ray.add_argument(
        "--ray-address",
        metavar="ADDRESS",
        help="workers placed by Ray on this cluster: HOST:PORT of the head, ray://HOST:PORT or auto",
    )
    ray.add_argument(
        "--ray-gpus", type=float, metavar="G", help="with --ray: GPUs in each worker's bundle (default 0)"
    )
    ray.add_argument(
        "--ray-strategy",
        choices=RAY_STRATEGY_CHOICES,
        default="spread",
        help="with --ray: spread the workers over the nodes (default), pack them, or strict-spread",
    )
    nodes = p.add_argument_group(
        "several machines: the same command on each (--rdzv, --hosts) or one command over ssh (-H)"
    )
    nodes.add_argument(
        "--nnodes",
        default="1",
        metavar="N|MIN:MAX",
        help="number of nodes (run the same command on each); with --rdzv MIN:MAX goes on with fewer",
    )
    nodes.add_argument(
        "--node-rank", type=integer, default=0, metavar="R", help="index of this node, 0..nnodes-1"
    )
    nodes.add_argument("--hosts", metavar="H1,H2", help="comma list of node addresses, in node-rank order")
    nodes.add_argument(
        "-H",
        "--host-slots",
        metavar="H1:S,H2:S",
        help="start the job on every host from here, over ssh (as horovodrun -H): S workers on each",
    )
    nodes.add_argument(
        "--ssh", default="ssh", metavar="CMD", help="with -H: the ssh command that reaches the hosts"
    )
    nodes.add_argument("--hostfile", metavar="FILE", help="file with one node address per line")
    nodes.add_argument(
        "--rdzv",
        metavar="HOST:PORT",
        help="nodes meet here (the same command on every node; HOST's node serves it): ranks by host name",
    )
    nodes.add_argument(
        "--rdzv-timeout",
        type=seconds,
        default=300.0,
        metavar="SECONDS",
        help="how long to wait for every node (default 300)",
    )
    nodes.add_argument(
        "--rdzv-last-call",
        type=seconds,
        metavar="SECONDS",
        help="with --nnodes MIN:MAX: how long a round with MIN nodes waits for more (default 10)",
    )
    nodes.add_argument(
        "--grow-every",
        type=seconds_or_never,
        default=0.0,
        metavar="SECONDS|never",
        help="with --nnodes MIN:MAX: a node that arrives while the job runs joins it at a step boundary once "
        "the job has run this long (default 0: at once); never: it waits for a restart",
    )
    nodes.add_argument(
        "--rdzv-token",
        metavar="TOKEN",
        help="the job's secret (or TFDIST_RDZV_TOKEN); default: a token file the serving node writes",
    )
    nodes.add_argument(
        "--rdzv-token-file",
        metavar="FILE",
        help="token file on a shared filesystem (default ~/.tfdist/rdzv/HOST_PORT.token)",
    )
    nodes.add_argument(
        "--base-port",
        type=integer,
        metavar="PORT",
        help="first port of the workers on each node (default: free ports on one node, 29400 on several)",
    )
    ps = p.add_argument_group("parameter servers")
    ps.add_argument(
        "--ps", type=integer, default=0, metavar="K", help="parameter servers per node (adds a chief)"
    )
    ps.add_argument("--chief", action="store_true", help="add a chief task to the cluster")
    output = p.add_argument_group("output")
    add_run_dir(output, "run_dir", "logs, attempts")
    output.add_argument("--no-prefix", action="store_true", help="do not prefix output lines with [w0] etc.")
    output.add_argument(
        "--quiet-workers", action="store_true", help="show only the chief (or w0) on the console"
    )
    faults = p.add_argument_group("failures, hangs and limits")
    faults.add_argument(
        "--grace",
        type=seconds,
        default=10.0,
        metavar="SECONDS",
        help="time between SIGTERM and SIGKILL (default 10)",
    )
    faults.add_argument(
        "--max-restarts",
        type=integer,
        default=0,
        metavar="K",
        help="restart every worker after a failure up to K times (default 0)",
    )
    faults.add_argument(
        "--watchdog-timeout",
        type=seconds_or_off,
        metavar="SECONDS|off",
        help="time without a step, output or heartbeat that counts as a hang (default: 20x the slowest "
        "step, 5-10 min, once steps run; off: no hang check)",
    )
    faults.add_argument(
        "--timeout", type=seconds, metavar="SECONDS", help="limit on the whole run (default: none)"
    )
    faults.add_argument(
        "--strict",
        action="store_true",
        help="stop the job when workers build a strategy that does not span it (default: a warning)",
    )
    how = p.add_argument_group("how each worker runs")
    how.add_argument(
        "--backend",
        default="tf",
        metavar="{tf,mpi,horovod}",
        help="synchronisation backend: tf (default), mpi, horovod",
    )
    how.add_argument(
        "--bind-to",
        choices=BIND_CHOICES,
        default="auto",
        help="bind each worker to its own cores: auto (CPU workers that fit the cores), core, none",
    )
    how.add_argument("--no-python", action="store_true", help="run the command as is instead of with Python")
    how.add_argument("-m", "--module", action="store_true", help="treat SCRIPT as a module name (python -m)")
    p.add_argument("script", metavar="SCRIPT", help="the Python script (or module with -m) every worker runs")
    p.add_argument("args", nargs=argparse.REMAINDER, help="arguments passed to the script untouched")
    p.set_defaults(run=run)
    p.notes_script_flags = True  # tfdist launch's own flags typed after the script are noted


def _hosts(args: argparse.Namespace) -> tuple[str, ...]:
    if args.hosts and args.hostfile:
        raise ConfigError("--hosts and --hostfile were both given; use one.")
    if args.hostfile:
        return nodes.read_hostfile(args.hostfile)
    if args.hosts:
        hosts = nodes.parse_hosts(args.hosts)
        if any(not h for h in hosts):
            raise ConfigError(f"--hosts={args.hosts!r} has an empty entry.")
        return hosts
    return ()


def config_from_args(args: argparse.Namespace) -> Any:
    """Build the LaunchConfig (validated) from parsed flags."""
    from tfdist.launcher import LaunchConfig
    from tfdist.launcher.membership import scheduler_nodes
    from tfdist.launcher.rendezvous import RendezvousSpec
    from tfdist.nodes import visible_gpus

    nproc = args.nproc_per_node
    gpus = args.gpus_per_worker or "1"
    ray = args.ray_address or args.ray
    slots = nodes.parse_host_slots(args.host_slots) if args.host_slots else ()
    if slots and nproc is not None and nproc != slots[0].slots:
        raise ConfigError(
            f"-n {nproc} and -H {args.host_slots} disagree: give the workers per host in -H (HOST:SLOTS) "
            "only."
        )
    if nproc is None:
        if slots:
            nproc = slots[0].slots
        else:
            nproc = 1 if args.cpu or gpus == "all" or ray else max(1, len(visible_gpus(os.environ)))
    command = ("-m", args.script, *args.args) if args.module else (args.script, *args.args)
    node_range = nodes.parse_node_range(args.nnodes, "--nnodes")
    if not args.rdzv:  # a scheduler's step answers the flags that describe the nodes: say so first
        scheduler_nodes(
            os.environ, ray is not None, args.hosts or args.hostfile, args.node_rank, node_range.high
        )
    rdzv = None
    if args.rdzv:
        rdzv = RendezvousSpec(
            args.rdzv,
            args.rdzv_timeout,
            args.rdzv_token,
            args.rdzv_token_file,
            args.rdzv_last_call,
            args.grow_every,
        )
    return LaunchConfig(
        command=command,
        nproc_per_node=nproc,
        nnodes=node_range.low,
        max_nnodes=node_range.high if node_range.elastic else None,
        node_rank=args.node_rank,
        hosts=_hosts(args),
        base_port=args.base_port,
        ps=args.ps,
        chief=args.chief,
        cpu=args.cpu,
        gpus_per_worker="1" if ray else gpus,
        run_dir=args.run_dir,
        prefix=not args.no_prefix,
        quiet_workers=args.quiet_workers,
        grace=args.grace,
        max_restarts=args.max_restarts,
        watchdog_timeout=args.watchdog_timeout,
        timeout=args.timeout,
        no_python=args.no_python,
        backend=args.backend,
        bind=args.bind_to,
        strict=args.strict,
        rdzv=rdzv,
        host_slots=slots,
        ssh=args.ssh,
        **_ray_options(args),
    )


def _ray_options(args: argparse.Namespace) -> dict[str, Any]:
    """``--ray`` / ``--ray-address ADDRESS``, ``--ray-strategy`` and ``--ray-gpus G``."""
    address = args.ray_address or args.ray
    if address is None:
        if args.ray_gpus is not None:
            raise ConfigError(
                f"--ray-gpus={args.ray_gpus:g} without --ray. Hint: add --ray (or --ray-address)."
            )
        return {}
    if args.gpus_per_worker not in (None, "1"):
        raise ConfigError(
            f"--gpus-per-worker={args.gpus_per_worker!r} with --ray: a worker's GPUs on Ray are --ray-gpus G."
        )
    gpus = 0.0 if args.cpu else (args.ray_gpus if args.ray_gpus is not None else 0.0)
    return {"ray": address, "ray_strategy": args.ray_strategy, "ray_gpus": gpus}


def run(args: argparse.Namespace) -> int:
    """Launch, then print where the logs are; return the run's exit code."""
    from tfdist.launcher import launch
    from tfdist.launcher.console import console_print

    result = launch(config_from_args(args))
    if result.exit_code == 0 and not args.host_slots:  # with -H, each host's launcher said it already
        console_print(
            f"tfdist launch: all workers finished in {result.duration_s:.1f} s "
            f"(attempts: {result.attempts}); logs in {result.run_dir}"
        )
    return result.exit_code
