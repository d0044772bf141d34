"""The command's words stay the command's: ``tfdist``'s own flags typed after the command are refused
(``tfdist slurm submit``, ``tfdist k8s``: argparse would hand them to the command, silently), or, for
``tfdist launch`` (torchrun's convention: they stay the script's), named in a one-line note.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from typing import Any


def _options(parser: Any) -> tuple[set[str], set[str]]:
    """``parser``'s option strings, and those of them that take a value (``--pods N``, not ``--resume``)."""
    known = {s for a in parser._actions for s in a.option_strings}
    return known, {s for a in parser._actions if a.nargs != 0 for s in a.option_strings}


def flag_after_command(argv: Sequence[str], parser: Any) -> str | None:
    """The first of ``parser``'s own flags typed after the start of the command when no ``--`` marks where
    the command starts (argparse would give it to the command); None otherwise.

    Input/Output: ``["--pods", "2", "python", "t.py", "--image", "x"]`` -> ``"--image"``;
    ``["--pods", "2", "--", "python", "t.py", "--image", "x"]`` -> None.
    """
    known, takes_value = _options(parser)
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            return None
        if not arg.startswith("-"):
            later = list(argv[i + 1 :])
            words = later[: later.index("--")] if "--" in later else later
            found = own_flags(words, parser)
            return words[found[0].start].partition("=")[0] if found else None
        if arg.partition("=")[0] not in known:
            return None  # a flag the parser does not know: argparse names it (and the nearest one)
        i += 2 if arg in takes_value else 1
    return None


def own_flags(words: Sequence[str], parser: Any) -> list[slice]:
    """Where ``parser``'s flags are among ``words`` (``--flag=value`` too), each with its value if any.

    Input/Output: ``["--epochs", "3", "-n", "2", "--cpu"]`` with launch's parser ->
    ``[slice(2, 4), slice(4, 5)]`` (``-n 2`` and ``--cpu``).
    """
    own, takes_value = _options(parser)
    found: list[slice] = []
    i = 0
    while i < len(words):
        name, has_value, _ = words[i].partition("=")
        end = i + 2 if not has_value and name in takes_value and i + 1 < len(words) else i + 1
        if name in own:
            found.append(slice(i, end))
        i = end
    return found


def flags_after_script(
    prog: str, before: Sequence[str], script: str, after: Sequence[str], parser: Any
) -> str:
    """A one-line note when flags of ``prog`` (help aside) come after the script, where they stay the
    script's words, showing the command that gives them to ``prog``; "" when there are none, or for a flag
    ``before`` already gives ``prog`` (typed again after the script, it is the script's own).

    Input/Output: ``("tfdist launch", [], "quickstart.py", ["-n", "2", "--cpu"], parser)`` ->
    ``"tfdist launch: -n 2 --cpu come after quickstart.py, so they go to the script, not to tfdist launch.
    Hint: put them first: tfdist launch -n 2 --cpu quickstart.py"``.
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
    they, them, go, come = (
        ("it", "it", "goes", "comes") if len(spans) == 1 else ("they", "them", "go", "come")
    )
    return (
        f"{prog}: {shlex.join(moved)} {come} after {script}, so {they} {go} to the script, not to {prog}. "
        f"Hint: put {them} first: {shlex.join(hint)}"
    )


def with_command_guard(parser: Any, example: str) -> None:
    """Make ``parser`` refuse, in one line, a flag of its own typed after the command without ``--``
    (``example`` shows the right order)."""
    parser.guard_example = example
