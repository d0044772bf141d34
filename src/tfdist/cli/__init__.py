"""Command-line entry point: ``tfdist <subcommand>``. argparse stops here; the rest sees Config objects."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from tfdist.errors import ConfigError, SetupError, TfdistError


class Parser(argparse.ArgumentParser):
    """ArgumentParser whose errors are one line (what, and where to look) with exit code 2."""

    def error(self, message: str) -> NoReturn:
        """Print ``<prog>: error: <message> (see <prog> --help)`` and exit 2, without the usage block."""
        sys.stderr.write(f"{self.prog}: error: {message} (see {self.prog} --help)\n")
        raise SystemExit(2)


def build_parser() -> Parser:
    """The full parser tree; each subcommand module adds its own sub-parser."""
    from tfdist.cli import bench as bench_cmd
    from tfdist.cli import env as env_cmd
    from tfdist.cli import estimate as estimate_cmd
    from tfdist.cli import k8s as k8s_cmd
    from tfdist.cli import launch as launch_cmd
    from tfdist.cli import run as run_cmd
    from tfdist.cli import slurm as slurm_cmd
    from tfdist.cli import train as train_cmd

    parser = Parser(
        prog="tfdist", description="Distributed TensorFlow/Keras training from a laptop to a cluster."
    )
    from tfdist import __version__

    parser.add_argument("--version", action="version", version=f"tfdist {__version__}")
    # dest "subcommand": "command" is what `slurm` and `run` call the user's command line (-- CMD...)
    sub = parser.add_subparsers(dest="subcommand", metavar="COMMAND", parser_class=Parser)
    sub.required = True
    env_cmd.register(sub)
    launch_cmd.register(sub)
    run_cmd.register(sub)
    train_cmd.register(sub)
    slurm_cmd.register(sub)
    k8s_cmd.register(sub)
    bench_cmd.register(sub)
    estimate_cmd.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; user errors print one line on stderr and return exit code 2."""
    # TensorFlow's C++ start-up lines (oneDNN, CPU features, absl) would bury a one-line error, and every
    # launched worker inherits this: quiet unless the user chose a level.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    args_list = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(args_list)
    args.argv = args_list  # as typed: `launch -H` starts the same command on other hosts
    try:
        return int(args.run(args) or 0)
    except (ConfigError, SetupError) as exc:
        sys.stderr.write(f"tfdist {args.subcommand}: error: {exc}\n")
        return 2
    except TfdistError as exc:
        sys.stderr.write(f"tfdist {args.subcommand}: {exc}\n")
        return 1
    except KeyboardInterrupt:
        return 130
