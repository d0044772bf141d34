"""``tfdist k8s manifest|submit|status|logs|delete``: one training job on Kubernetes."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from tfdist import files
from tfdist.cli.argtypes import command_words, integer
from tfdist.cli.guards import with_command_guard
from tfdist.errors import ConfigError


def register(sub: Any) -> None:
    """Add ``k8s`` and its sub-commands."""
    from tfdist.cli import Parser
    from tfdist.k8s import KINDS

    p = sub.add_parser("k8s", help="write, submit and watch Kubernetes jobs")
    actions = p.add_subparsers(dest="action", metavar="ACTION", parser_class=Parser)
    actions.required = True
    for name, helptext in (
        ("manifest", "print (or -o write) the job's Kubernetes objects as YAML"),
        ("submit", "create the job's objects on the cluster kubectl talks to"),
    ):
        a = actions.add_parser(name, help=helptext)
        a.add_argument(
            "--pods",
            type=integer,
            required=True,
            metavar="N",
            help="pods of the job (each runs one training process, or --nproc-per-pod K)",
        )
        a.add_argument("--image", required=True, help="container image with TensorFlow and tfdist installed")
        a.add_argument("--name", default="train", help="job name, also the Service and pod names (train)")
        a.add_argument("--namespace", help="namespace (default: the kubeconfig context's)")
        a.add_argument(
            "--kind",
            choices=KINDS,
            default="job",
            help="job: Indexed Job + headless Service; jobset: JobSet; tfjob: Kubeflow TFJob (v1)",
        )
        a.add_argument(
            "--gpus-per-pod",
            type=integer,
            default=0,
            metavar="G",
            help="GPUs of each pod (nvidia.com/gpu; default 0: CPU); with --nproc-per-pod K, G is K",
        )
        a.add_argument("--cpus-per-pod", metavar="CPUS", help="CPU request of each pod (e.g. 8 or 500m)")
        a.add_argument("--memory-per-pod", metavar="SIZE", help="memory request of each pod (e.g. 32Gi)")
        a.add_argument(
            "--pvc",
            action="append",
            default=[],
            metavar="CLAIM:PATH",
            help="mount a PersistentVolumeClaim in every pod (repeatable)",
        )
        a.add_argument(
            "--env", action="append", default=[], metavar="NAME=VALUE", help="variable of every pod"
        )
        a.add_argument("--port", type=integer, default=2222, help="port of every pod (default 2222)")
        a.add_argument(
            "--max-restarts",
            type=integer,
            default=3,
            help="times the whole job may start again after a failure (default 3)",
        )
        a.add_argument("--python", default="python", help="the image's Python with tfdist (python)")
        a.add_argument(
            "--nproc-per-pod",
            type=integer,
            default=1,
            metavar="K",
            help="training processes per pod, one GPU each: the pod runs tfdist launch -n K (default 1)",
        )
        if name == "manifest":
            a.add_argument("-o", "--output", help="write to this file instead of stdout")
        a.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND... run in every pod")
        a.set_defaults(run=run_manifest if name == "manifest" else run_submit)
        with_command_guard(a, f"tfdist k8s {name} --pods 2 --image IMAGE -- python train.py")
    for name, helptext in (
        ("status", "show a job's state and its pods"),
        ("logs", "print the output of a job's pods"),
        ("delete", "delete a job and its pods"),
    ):
        a = actions.add_parser(name, help=helptext)
        a.add_argument("name", metavar="NAME")
        a.add_argument("--namespace", help="namespace (default: the kubeconfig context's)")
        a.add_argument("--kind", choices=KINDS, default="job", help="what NAME is (default job)")
        a.set_defaults(run={"status": run_status, "logs": run_logs, "delete": run_delete}[name])


def spec_from_args(args: argparse.Namespace) -> Any:
    """The validated K8sJobSpec of the flags (ConfigError, one line, on a bad value)."""
    from tfdist.k8s import K8sJobSpec
    from tfdist.k8s.spec import parse_env, parse_pvc

    return K8sJobSpec(
        command=tuple(command_words(args.command)),
        image=args.image,
        workers=args.pods,
        name=args.name,
        namespace=args.namespace,
        kind=args.kind,
        gpus_per_worker=args.gpus_per_pod,
        cpu=args.cpus_per_pod,
        memory=args.memory_per_pod,
        pvcs=tuple(parse_pvc(text) for text in args.pvc),
        env=tuple(parse_env(text) for text in args.env),
        port=args.port,
        max_restarts=args.max_restarts,
        python=args.python,
        nproc_per_pod=args.nproc_per_pod,
    )


def run_manifest(args: argparse.Namespace) -> int:
    """Print the manifest, or write it atomically to ``--output``."""
    from tfdist.k8s import render_yaml

    text = render_yaml(spec_from_args(args))
    if args.output is None:
        sys.stdout.write(text)
        return 0
    directory = os.path.dirname(os.path.abspath(args.output))
    if not os.path.isdir(directory):
        raise ConfigError(f"-o {args.output!r}: directory {directory} does not exist.")
    files.write_text(args.output, text)
    print(f"wrote {args.output}; apply it with: kubectl apply -f {args.output}")
    return 0


def run_submit(args: argparse.Namespace) -> int:
    """Create the objects in order; when one fails, remove those already created (nothing half-made)."""
    from tfdist.k8s import cluster, render_manifests

    spec = spec_from_args(args)
    connected = cluster.connect()
    namespace = spec.namespace or connected.namespace
    made: list[str] = []
    try:
        for manifest in render_manifests(spec):
            cluster.create(connected, manifest, namespace)
            made.append(manifest["kind"])
    except Exception:
        for kind in reversed(made):
            cluster.delete(connected, kind, spec.name, namespace)
        raise
    print(
        f"created {' and '.join(made)} {spec.name!r} in namespace {namespace!r} on {connected.server}; "
        f"watch it with: tfdist k8s status {spec.name} --kind {spec.kind} --namespace {namespace}"
    )
    return 0


def _target(args: argparse.Namespace) -> tuple[Any, str, str]:
    from tfdist.k8s import cluster

    connected = cluster.connect()
    return connected, cluster.KIND_OF[args.kind], args.namespace or connected.namespace


def run_status(args: argparse.Namespace) -> int:
    """Print the job's state and its pods; exit 0 (the state is data, not an error)."""
    from tfdist.k8s import cluster
    from tfdist.k8s.status import describe

    connected, kind, namespace = _target(args)
    status = cluster.read_status(connected, kind, args.name, namespace)
    sys.stdout.write(
        describe(kind, args.name, namespace, status, cluster.pods(connected, args.name, namespace))
    )
    return 0


def run_logs(args: argparse.Namespace) -> int:
    """Print every pod's output so far, each line prefixed with its pod."""
    from tfdist.k8s import cluster

    connected, _, namespace = _target(args)
    found = cluster.pods(connected, args.name, namespace)
    if not found:
        raise ConfigError(
            f"no pods of {args.name!r} in namespace {namespace!r}. Hint: tfdist k8s status {args.name}."
        )
    for line in cluster.pod_logs(connected, found, namespace):
        sys.stdout.write(line)
    return 0


def run_delete(args: argparse.Namespace) -> int:
    """Delete the job (its pods go with it) and, for an Indexed Job, its Service."""
    from tfdist.k8s import cluster

    connected, kind, namespace = _target(args)
    cluster.delete(connected, kind, args.name, namespace)
    if kind == "Job":
        cluster.delete(connected, "Service", args.name, namespace)
    print(f"deleted {kind} {args.name!r} in namespace {namespace!r}")
    return 0
