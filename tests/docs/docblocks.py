"""The code blocks of README.md and docs/: where they are, and what each says about running it.

A ``bash`` or ``python`` block either runs or says why not, in an HTML comment on the line before it:

    <!-- example: slow -->          run in the second tier (it trains longer, or repeats a first-tier example)
    <!-- example: exit N -->        run; it must exit with code N
    <!-- example: file NAME -->     not run: its text is the file NAME in every example's directory
    <!-- example: skip REASON -->   not run here, for REASON (a GPU, a cluster, root)

A block without a comment runs in the first tier and must exit 0.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHECKED_LANGUAGES = ("bash", "python")
KINDS = ("run", "slow", "exit", "file", "skip")
DIRECTIVE = re.compile(r"^<!-- example: (?P<kind>\S+)(?: (?P<arg>.*?))? -->$")
FENCE = re.compile(r"^```(?P<lang>[\w-]*)\s*$")


@dataclass(frozen=True)
class Block:
    """One fenced code block: its page and line, language, text and directive."""

    page: str
    line: int
    lang: str
    text: str
    kind: str = "run"
    arg: str = ""

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"

    @property
    def runs(self) -> bool:
        return self.lang in CHECKED_LANGUAGES and self.kind in ("run", "slow", "exit")


def sources() -> list[Path]:
    """README.md and every page of the docs."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def blocks(path: Path) -> list[Block]:
    """Every top-level fenced block of one markdown file, with the directive on the line before it."""
    lines = path.read_text().splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        end = next((j for j in range(i + 1, len(lines)) if lines[j].rstrip() == "```"), None)
        assert end is not None, f"{path.relative_to(ROOT)}:{i + 1}: unclosed code block"
        directive = DIRECTIVE.match(lines[i - 1].strip()) if i > 0 else None
        found.append(
            Block(
                page=str(path.relative_to(ROOT)),
                line=i + 1,
                lang=opening["lang"],
                text="\n".join(lines[i + 1 : end]) + "\n",
                kind=directive["kind"] if directive else "run",
                arg=(directive["arg"] or "") if directive else "",
            )
        )
        i = end + 1
    return found


def all_blocks() -> list[Block]:
    return [block for path in sources() for block in blocks(path)]


def problems(block: Block) -> list[str]:
    """What is wrong with a block's directive (empty when it is well-formed)."""
    if block.lang not in CHECKED_LANGUAGES:
        return []
    if block.kind not in KINDS:
        return [f"{block.where}: unknown directive 'example: {block.kind}' (one of {', '.join(KINDS)})"]
    if block.kind == "skip" and len(block.arg.strip()) < 10:
        return [f"{block.where}: 'example: skip' needs the reason the block cannot run here"]
    if block.kind == "exit" and not block.arg.isdigit():
        return [f"{block.where}: 'example: exit N' needs the expected exit code"]
    if block.kind == "file" and not re.fullmatch(r"[\w.-]+", block.arg):
        return [f"{block.where}: 'example: file NAME' needs a plain file name"]
    return []


def example_files() -> dict[str, str]:
    """NAME -> text of every ``example: file NAME`` block."""
    return {b.arg: b.text for b in all_blocks() if b.lang in CHECKED_LANGUAGES and b.kind == "file"}
