"""The command's words stay the command's: ``tfdist``'s own flags typed after the command are refused
(``tfdist slurm submit``, ``tfdist k8s``: argparse would hand them to the command, silently), or, for
``tfdist launch`` (torchrun's convention: they stay the script's), named in a one-line note.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from typing import Any


def _value_options(parser: Any) -> frozenset[str]:
    """The option strings of ``parser`` that take a value (``--pods N``), not switches (``--resume``)."""
    return frozenset(
        s for a in parser._actions if a.option_strings and a.nargs != 0 for s in a.option_strings
    )


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
    known = {s for action in parser._actions for s in action.option_strings}
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            return None
        if arg.startswith("-"):
            if arg.partition("=")[0] not in known:
                return None  # a flag the parser does not know: argparse names it (and the nearest one)
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
    (``example`` shows the right order; the check is the CLI parser's)."""
    parser.guard_example = example
