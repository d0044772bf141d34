"""What the command line is checked for before argparse reads it.

- Old flag names keep working: each is rewritten to its new name, with one line on stderr that names the
  new spelling (``tfdist k8s manifest: --workers is an old spelling: write --pods.``).
- A sub-command that runs a command (``tfdist slurm submit ... -- python train.py``) refuses its own flags
  typed after that command without ``--``: argparse would hand them to the command, silently.

``tfdist launch`` has its own rewriting (cli/launch.py): its old ``--ray ADDRESS`` depends on the next word.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from typing import Any


def rewrite(
    argv: Sequence[str], renames: Mapping[str, str], prog: str, takes_value: frozenset[str] = frozenset()
) -> list[str]:
    """``argv`` with every old option name of ``renames`` replaced by its new one, a note for each.

    Only the options before the command are read (before ``--``, or before the first word that is not an
    option or the value of one in ``takes_value``): the command's own words stay untouched.
    Input/Output: ``["--workers", "2", "--", "python", "t.py", "--workers", "9"]`` with
    ``{"--workers": "--pods"}`` -> ``["--pods", "2", "--", "python", "t.py", "--workers", "9"]``.
    """
    out: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--" or not arg.startswith("-"):
            out.extend(argv[i:])
            break
        name, has_value, value = arg.partition("=")
        new = renames.get(name)
        if new is not None:
            sys.stderr.write(f"{prog}: {name} is an old spelling: write {new}.\n")
            arg = f"{new}={value}" if has_value else new
        out.append(arg)
        if not has_value and (new or name) in takes_value and i + 1 < len(argv):
            out.append(argv[i + 1])  # the option's value, even when it looks like a word of the command
            i += 1
        i += 1
    return out


def _value_options(parser: Any) -> frozenset[str]:
    """The option strings of ``parser`` that take a value (``--pods N``), not switches (``--resume``)."""
    return frozenset(
        s for a in parser._actions if a.option_strings and a.nargs != 0 for s in a.option_strings
    )


def with_old_spellings(parser: Any, renames: Mapping[str, str]) -> None:
    """Make ``parser`` (an argparse sub-parser) accept the old names of ``renames``, hidden from its help.

    argparse hands a sub-command its arguments through that parser's ``parse_known_args``, so the rewrite
    goes there: the class of this one parser changes, not the parser tree.
    """
    base = type(parser)

    class OldSpellingsParser(base):  # type: ignore[misc, valid-type]
        def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
            given = (
                rewrite(list(args), renames, self.prog, _value_options(self)) if args is not None else None
            )
            return super().parse_known_args(given, namespace)

    parser.__class__ = OldSpellingsParser


def flag_after_command(argv: Sequence[str], parser: Any) -> str | None:
    """The first of ``parser``'s own flags typed after the start of the command, when no ``--`` marks
    where the command starts; None otherwise.

    ``tfdist slurm submit python train.py --nodes 2`` would otherwise submit one node running
    ``python train.py --nodes 2``: argparse gives everything after the first word of the command to the
    command. With ``--`` before the command, its words are the user's and nothing is checked.
    Input/Output: ``["--pods", "2", "python", "t.py", "--image", "x"]`` -> ``"--image"``;
    ``["--pods", "2", "--", "python", "t.py", "--image", "x"]`` -> None.
    """
    takes_value = _value_options(parser)
    own = {s for a in parser._actions for s in a.option_strings}
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            return None
        if arg.startswith("-"):
            i += 2 if arg in takes_value else 1
            continue
        for later in argv[i + 1 :]:
            if later == "--":
                return None
            if later.partition("=")[0] in own:
                return later.partition("=")[0]
        return None
    return None


def with_command_guard(parser: Any, example: str) -> None:
    """Make ``parser`` refuse, in one line, a flag of its own typed after the command without ``--``
    (``example`` shows the right order)."""
    base = type(parser)

    class CommandGuardParser(base):  # type: ignore[misc, valid-type]
        def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
            if args is not None:
                flag = flag_after_command(list(args), self)
                if flag is not None:
                    self.error(
                        f"{flag} comes after the command, so it would be passed to the command; put "
                        f"{self.prog}'s flags first and the command after --: {example}"
                    )
            return super().parse_known_args(args, namespace)

    parser.__class__ = CommandGuardParser
