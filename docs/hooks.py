"""Generated parts of the docs: the command reference, the variables table, the supported stacks.

- ``<!-- tfdist:cli -->`` becomes the command reference when MkDocs reads the page (this file is an MkDocs
  hook): :func:`tfdist.cli.build_parser` builds the same argparse tree that ``tfdist`` parses, and every
  command and sub-command of it is rendered (usage, description, one row per option with its default and
  choices). Never written by hand, never committed.
- ``<!-- generated:NAME:begin -->`` … ``<!-- generated:NAME:end -->`` blocks are committed, so the sources
  read well on their own: ``variables`` (from ``tfdist.variables``) and ``supported-stacks`` (from
  ``benchmarks/results/compat.json``, through ``devtools/compat.py``). ``python docs/hooks.py --write``
  rewrites them; a test fails when a block differs from what its generator gives.
- The measured results are a page of their own, ``docs/performance.md``, whose tables ``devtools/perfpage.py``
  writes from the JSON under ``benchmarks/results`` (a test keeps them equal).
"""

from __future__ import annotations

import argparse
import html
import importlib.util
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

PLACEHOLDER = "<!-- tfdist:cli -->"
DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
#: reST roles in docstrings (":func:`strategy`"): the code span stays, the role goes.
ROLE = re.compile(r":(?:py:)?(?:func|class|meth|mod|attr|data|exc|obj|const):(?=<code>)")
BLOCK = re.compile(
    r"(<!-- generated:(?P<name>[\w-]+):begin -->\n\n)(?P<body>.*?)(\n\n<!-- generated:(?P=name):end -->)",
    re.S,
)


def _cell(text: str) -> str:
    """Text for a markdown table cell: no pipes, no raw HTML, no line breaks."""
    return html.escape(" ".join(text.split())).replace("|", "\\|")


def _flag(action: argparse.Action) -> str:
    if not action.option_strings:
        return f"`{action.metavar or action.dest}`"
    names = ", ".join(f"`{name}`" for name in action.option_strings)
    if action.nargs == 0:
        return names
    metavar = action.metavar or (
        "{" + ",".join(str(c) for c in action.choices) + "}" if action.choices else action.dest.upper()
    )
    return f"{names} `{metavar}`"


def _default(action: argparse.Action) -> str:
    default = action.default
    if action.nargs == 0 or default in (None, argparse.SUPPRESS) or default == [] or default == ():
        return ""
    if isinstance(default, float) and default.is_integer():
        default = int(default)  # seconds read as 300, not 300.0
    return f"`{default}`"


def _subparsers(parser: argparse.ArgumentParser) -> argparse._SubParsersAction | None:
    return next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)


def _options_table(parser: argparse.ArgumentParser) -> list[str]:
    rows: list[str] = []
    for group in parser._action_groups:
        actions = [
            a
            for a in group._group_actions
            if not isinstance(a, (argparse._HelpAction, argparse._SubParsersAction))
            and a.help != argparse.SUPPRESS
        ]
        if not actions:
            continue
        rows += ["", f"**{group.title[0].upper() + group.title[1:]}**", ""]
        first = "Argument" if all(not a.option_strings for a in actions) else "Option"
        rows += [f"| {first} | Default | Meaning |", "|---|---|---|"]
        for action in actions:
            meaning = (action.help or "").replace("%%", "%")  # argparse %-formats help: %% is one %
            if action.choices and action.option_strings and action.nargs != 0:
                meaning += f" (one of: {', '.join(str(c) for c in action.choices)})"
            rows.append(f"| {_flag(action)} | {_default(action)} | {_cell(meaning)} |")
    return rows


def _command(parser: argparse.ArgumentParser, name: str, summary: str | None, level: int) -> list[str]:
    lines = [f"{'#' * level} `{name}`", ""]
    if summary:
        lines += [html.escape(summary[0].upper() + summary[1:]) + ".", ""]
    # A description that only repeats the usage line ("tfdist launch [options] SCRIPT.py ...") adds nothing.
    if parser.description and parser.description != summary and not parser.description.startswith("tfdist "):
        lines += [html.escape(parser.description), ""]
    lines += ["```text", parser.format_usage().strip(), "```"]
    lines += _options_table(parser)
    if parser.epilog:
        lines += ["", html.escape(parser.epilog)]
    lines.append("")
    sub = _subparsers(parser)
    if sub is not None:
        helps = {choice.dest: choice.help for choice in sub._choices_actions}
        for child_name, child in sub.choices.items():
            lines += _command(child, f"{name} {child_name}", helps.get(child_name), level + 1)
    return lines


def cli_reference() -> str:
    """Markdown for every ``tfdist`` command, from :func:`tfdist.cli.build_parser`."""
    from tfdist.cli import build_parser

    parser = build_parser()
    sub = _subparsers(parser)
    assert sub is not None
    helps = {choice.dest: choice.help for choice in sub._choices_actions}
    lines = ["```text", parser.format_usage().strip(), "```", ""]
    for name, child in sub.choices.items():
        lines += _command(child, f"tfdist {name}", helps.get(name), 2)
    return "\n".join(lines)


def _devtool(name: str) -> Any:
    """``devtools/NAME.py`` as a module (devtools is not a package)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "devtools" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _supported_stacks() -> str:
    return str(_devtool("compat").results_table())


def _how_fast() -> str:
    report = json.loads((ROOT / "benchmarks" / "results" / "compare_commits.json").read_text())
    # Written for README at the root; the block lives on docs/performance.md, whose links are relative.
    text = str(_devtool("perfpage").how_fast(report))
    text = text.replace("Every figure, with its setup: [Performance](docs/performance.md); to", "To")
    return text.replace("](docs/", "](")


def _variables_table() -> str:
    from tfdist import variables

    return variables.markdown_table()


#: name of a committed block -> what it must hold
GENERATORS: dict[str, Callable[[], str]] = {
    "variables": _variables_table,
    "supported-stacks": _supported_stacks,
    "how-fast": _how_fast,
}
#: Pages outside docs/ with generated blocks (README keeps none: its dates would go stale in prose).
OTHER_PAGES: tuple[Path, ...] = ()


def generated_blocks(text: str) -> list[tuple[str, str]]:
    """(name, committed body) of every generated block in a page."""
    return [(m["name"], m["body"]) for m in BLOCK.finditer(text)]


def regenerate(text: str) -> str:
    """The page with every generated block rewritten by its generator."""
    return BLOCK.sub(lambda m: m.group(1) + GENERATORS[m["name"]]() + m.group(4), text)


def on_page_markdown(markdown: str, **_: Any) -> str:
    """Replace the placeholder with the generated reference (other pages pass through)."""
    if PLACEHOLDER in markdown:
        markdown = markdown.replace(PLACEHOLDER, cli_reference())
    return markdown


def on_page_content(html_text: str, **_: Any) -> str:
    """Docstrings carry reST roles for readers of the source; the rendered page shows the code alone."""
    return ROLE.sub("", html_text)


def main(argv: list[str]) -> int:
    """``--write``: rewrite the generated blocks of every page; otherwise list the pages that are stale."""
    stale = []
    for page in [*sorted(DOCS.rglob("*.md")), *OTHER_PAGES]:
        text = page.read_text()
        fresh = regenerate(text)
        if fresh != text:
            stale.append(page.relative_to(ROOT))
            if "--write" in argv:
                page.write_text(fresh)
    for path in stale:
        print(f"{'rewrote' if '--write' in argv else 'stale'}: {path}")
    return 1 if stale and "--write" not in argv else 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "src"))
    raise SystemExit(main(sys.argv[1:]))
