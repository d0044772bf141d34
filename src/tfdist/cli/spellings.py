"""Old flag names that keep working: each is rewritten to its new name before parsing, with one line on
stderr that names the new spelling (``tfdist k8s manifest: --workers is an old spelling: write --pods.``).

``tfdist launch`` has its own rewriting (cli/launch.py): its old ``--ray ADDRESS`` depends on the next word.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from typing import Any


def rewrite(argv: Sequence[str], renames: Mapping[str, str], prog: str) -> list[str]:
    """``argv`` with every old option name of ``renames`` replaced by its new one, a note for each.

    Only options before ``--`` are read (what follows is the user's command, untouched).
    Input/Output: ``["--workers", "2", "--", "python", "t.py", "--workers", "9"]`` with
    ``{"--workers": "--pods"}`` -> ``["--pods", "2", "--", "python", "t.py", "--workers", "9"]``.
    """
    out: list[str] = []
    for i, arg in enumerate(argv):
        if arg == "--":
            out.extend(argv[i:])
            break
        name, has_value, value = arg.partition("=")
        new = renames.get(name)
        if new is None:
            out.append(arg)
            continue
        sys.stderr.write(f"{prog}: {name} is an old spelling: write {new}.\n")
        out.append(f"{new}={value}" if has_value else new)
    return out


def with_old_spellings(parser: Any, renames: Mapping[str, str]) -> None:
    """Make ``parser`` (an argparse sub-parser) accept the old names of ``renames``, hidden from its help.

    argparse hands a sub-command its arguments through that parser's ``parse_known_args``, so the rewrite
    goes there: the class of this one parser changes, not the parser tree.
    """
    base = type(parser)

    class OldSpellingsParser(base):  # type: ignore[misc, valid-type]
        def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
            given = rewrite(list(args), renames, self.prog) if args is not None else None
            return super().parse_known_args(given, namespace)

    parser.__class__ = OldSpellingsParser


def translate(message: str, renames: Mapping[str, str]) -> str:
    """A message that names an old flag, with the new names (the checks below the CLI keep the old ones
    in their text; the user reads the flags they can type)."""
    for old, new in renames.items():
        message = message.replace(old + " ", new + " ").replace(old + "=", new + "=")
    return message
