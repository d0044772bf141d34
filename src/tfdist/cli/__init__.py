"""Command-line entry point: ``tfdist <subcommand>``. argparse stops here; the rest sees Config objects."""

from __future__ import annotations

import argparse
import difflib
import importlib
import os
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from tfdist.cli.guards import flag_after_command, flags_after_script
from tfdist.errors import ConfigError, SetupError, TfdistError

#: The namespace attribute naming the deepest parser that was left words it does not know.
_LEFT_OVER = "_tfdist_left_over_parser"


class Parser(argparse.ArgumentParser):
    """ArgumentParser whose errors are one line with exit code 2, naming the nearest word it knows."""

    def error(self, message: str) -> NoReturn:
        """Print ``<prog>: error: <message> (see <prog> --help)`` and exit 2, without the usage block."""
        sys.stderr.write(f"{self.prog}: error: {message} (see {self.prog} --help)\n")
        raise SystemExit(2)

    #: The right order, shown when a flag of this parser comes after its command (:mod:`tfdist.cli.guards`).
    guard_example: str | None = None
    #: ``tfdist launch``: its own flags typed after the script are noted (they go to the script).
    notes_script_flags = False

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        """argparse's, also noting the parser left with unknown words; argparse hands a sub-command's words
        here, so the checks of words typed in the wrong place run for the parser that has them."""
        if args is not None and self.guard_example is not None:
            flag = flag_after_command(list(args), self)
            if flag is not None:
                self.error(
                    f"{flag} comes after the command, so it would be passed to the command; put "
                    f"{self.prog}'s flags first and the command after --: {self.guard_example}"
                )
        namespace, extras = super().parse_known_args(args, namespace)
        if self.notes_script_flags and args is not None and getattr(namespace, "script", None) is not None:
            given = list(args)
            before = given[: len(given) - len(namespace.args) - 1]
            note = flags_after_script(self.prog, before, namespace.script, namespace.args, self)
            if note:
                sys.stderr.write(note + "\n")
        if extras and not hasattr(namespace, _LEFT_OVER):  # a sub-command's parser sets it first
            setattr(namespace, _LEFT_OVER, self)
        return namespace, extras

    def parse_args(self, args: Any = None, namespace: Any = None) -> Any:
        """argparse's, with unknown flags reported by the sub-command's parser, which knows its flags."""
        namespace, extras = self.parse_known_args(args, namespace)
        owner = vars(namespace).pop(_LEFT_OVER, self)
        if extras:
            owner.error(f"unrecognized arguments: {' '.join(extras)}{owner.nearest_flags(extras)}")
        return namespace

    def nearest_flags(self, words: Sequence[str]) -> str:
        """`` (did you mean --cpu?)`` for the unknown flags among ``words`` close to one of this parser's.

        Input/Output: ``["--cpus", "--nnode=2"]`` -> ``" (did you mean --cpu for --cpus, --nnodes for
        --nnode?)"``; ``["x.py"]`` -> ``""``."""
        # Compared without the dashes, which every flag shares: --nprocs is not close to --ps.
        known = {s.lstrip("-"): s for a in self._actions for s in a.option_strings}
        pairs = []
        for word in words:
            name = word.partition("=")[0]
            if name.startswith("-") and name not in known.values():
                close = difflib.get_close_matches(name.lstrip("-"), known, n=1)
                pairs += [(name, known[c]) for c in close]
        if len(pairs) < 2:
            return f" (did you mean {pairs[0][1]}?)" if pairs else ""
        return f" (did you mean {', '.join(f'{close} for {name}' for name, close in pairs)}?)"

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        """argparse's check of a choice (a sub-command's name too), naming the nearest choice first."""
        try:
            super()._check_value(action, value)
        except argparse.ArgumentError:
            choices = [str(c) for c in action.choices or ()]
            close = difflib.get_close_matches(str(value), choices, n=1)
            if not close:
                raise
            listed = ", ".join(map(repr, choices))
            raise argparse.ArgumentError(
                action, f"invalid choice: {value!r} (did you mean {close[0]}? choose from {listed})"
            ) from None


def examples(*lines: str) -> dict[str, Any]:
    """``add_parser`` keywords for a ``--help`` ending with example commands, kept as written."""
    return {
        "epilog": "examples:\n\n" + "\n".join(f"    {line}" for line in lines),
        "formatter_class": argparse.RawDescriptionHelpFormatter,
    }


def build_parser() -> Parser:
    """The full parser tree; each subcommand module adds its own sub-parser."""
    from tfdist import __version__

    parser = Parser(
        prog="tfdist", description="Distributed TensorFlow/Keras training from a laptop to a cluster."
    )
    parser.add_argument("--version", action="version", version=f"tfdist {__version__}")
    # dest "subcommand": "command" is what `slurm` and `run` call the user's command line (-- CMD...)
    sub = parser.add_subparsers(dest="subcommand", metavar="COMMAND", parser_class=Parser)
    sub.required = True
    for command in ("env", "launch", "run", "train", "slurm", "k8s", "bench", "estimate"):
        importlib.import_module(f"tfdist.cli.{command}").register(sub)
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
