"""What the command line is checked for before argparse reads it.

- Old flag names keep working: each is rewritten to its new name, with one line on stderr that names the
  new spelling (``tfdist k8s manifest: --workers is an old spelling: write --pods.``).
- A sub-command that runs a command (``tfdist slurm submit ... -- python train.py``) refuses its own flags
  typed after that command without ``--``: argparse would hand them to the command, silently.
  ``tfdist launch`` hands them to the script (torchrun's convention) with a one-line note (cli/launch.py).

``tfdist launch`` has its own rewriting (cli/launch.py): its old ``--ray ADDRESS`` depends on the next word.
"""

from __future__ import annotations

import shlex
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
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            return None
        if arg.startswith("-"):
            i += 2 if arg in takes_value else 1
            continue
        later = list(argv[i + 1 :])
        words = later[: later.index("--")] if "--" in later else later
        found = own_flags(words, parser)
        return words[found[0].start].partition("=")[0] if found else None
    return None


def own_flags(words: Sequence[str], parser: Any) -> list[slice]:
    """Where ``parser``'s flags are among ``words`` (its exact option strings, ``--flag=value`` too), each
    with the value that follows it when it takes one: a command's own flags typed after the command, where
    they are the command's words.

    Input/Output: ``["--epochs", "3", "-n", "2", "--cpu"]`` with launch's parser ->
    ``[slice(2, 4), slice(4, 5)]`` (``-n 2`` and ``--cpu``).
    """
    takes_value = _value_options(parser)
    own = {s for a in parser._actions for s in a.option_strings}
    found: list[slice] = []
    i = 0
    while i < len(words):
        name, has_value, _ = words[i].partition("=")
        if name in own:
            end = i + 2 if not has_value and name in takes_value and i + 1 < len(words) else i + 1
            found.append(slice(i, end))
            i = end
        else:
            i += 1
    return found


def flags_after_script(
    prog: str, before: Sequence[str], script: str, after: Sequence[str], parser: Any
) -> str:
    """A one-line note when flags of ``prog`` (``parser``'s, help aside) come after the script: they stay
    the script's words (everything after the script is the script's, as with torchrun; the script may want
    them), and the note shows the command that gives them to ``prog``. Empty when there are none, and for
    a flag that ``before`` already gives ``prog``: typed again after the script, it is the script's own.

    Input/Output: ``("tfdist launch", [], "quickstart.py", ["-n", "2", "--cpu"], parser)`` ->
    ``"tfdist launch: -n 2 --cpu come after quickstart.py, so they go to the script, not to tfdist launch.
    Hint: put them first: tfdist launch -n 2 --cpu quickstart.py"``; ``(..., ["-n", "2"], "t.py", ["-n",
    "5"], parser)`` -> ``""``.
    """
    dest = {s: a.dest for a in parser._actions for s in a.option_strings}
    given = {dest.get(word.partition("=")[0]) for word in before} - {None}
    spans = [
        s
        for s in own_flags(after, parser)
        if after[s.start] not in ("-h", "--help") and dest[after[s.start].partition("=")[0]] not in given
    ]
    if not spans:
        return ""
    moved = [word for s in spans for word in after[s]]
    rest = [word for i, word in enumerate(after) if not any(s.start <= i < s.stop for s in spans)]
    hint = [*prog.split(), *moved, *(w for w in before if w != "--"), script, *rest]
    one = len(spans) == 1
    they, them, go, come = ("it", "it", "goes", "comes") if one else ("they", "them", "go", "come")
    return (
        f"{prog}: {shlex.join(moved)} {come} after {script}, so {they} {go} to the script, not to {prog}. "
        f"Hint: put {them} first: {shlex.join(hint)}"
    )


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
