"""docs/guides/troubleshooting.md quotes tfdist's messages as tfdist prints them: in every message heading
outside the "From …" sections (TensorFlow's, MPI's, Slurm's own words), each piece between two ``…`` (the
parts that vary) is text of src/tfdist, so a message reworded in the code fails here until the page
follows."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "guides" / "troubleshooting.md"
#: Implicit concatenation of string literals across lines: ``"a "\n    f"b"`` reads as ``a b``.
JOIN = re.compile(r"""(["'])\s*\n\s*[rRbBfF]{0,2}\1""")
#: What the CLI or the exception's class puts before the message itself.
PREFIX = re.compile(r"^(?:tfdist [a-z]+(?: [a-z]+)?: (?:error: )?)?(?:\w+Error: )?")
#: A piece's ends may be punctuation that a value's text sits against (``(…)``, ``'…'``, ``…;``).
EDGES = " ()'\";:,."


def source_text() -> str:
    text = "\n".join(p.read_text() for p in sorted((ROOT / "src" / "tfdist").rglob("*.py")))
    return JOIN.sub("", text)


def pieces(message: str) -> list[str]:
    """The fixed parts of a quoted message: split at ``…``, ends trimmed, pieces of 4 characters or more."""
    parts = (part.strip(EDGES) for part in PREFIX.sub("", message).split("…"))
    return [part for part in parts if len(part) >= 4]


def tfdist_messages(page: str) -> list[str]:
    """Every ``### `message``` heading's messages (``a`` / ``b``: two), outside the "## From …" sections."""
    found: list[str] = []
    theirs = False
    for line in page.splitlines():
        if line.startswith("## "):
            theirs = line.startswith("## From ")
        elif line.startswith("### ") and not theirs:
            found += re.findall(r"`([^`]+)`", line)
    return found


@pytest.fixture(scope="module")
def source() -> str:
    return source_text()


def test_the_page_quotes_tfdists_messages() -> None:
    assert len(tfdist_messages(PAGE.read_text())) >= 30


@pytest.mark.parametrize("message", tfdist_messages(PAGE.read_text()))
def test_each_tfdist_message_is_in_the_source(message: str, source: str) -> None:
    missing = [piece for piece in pieces(message) if piece not in source]
    assert pieces(message), f"{message!r}: nothing fixed to check"
    assert not missing, f"{message!r}: not in src/tfdist: {missing} (copy the message from the code)"


@pytest.mark.parametrize(
    ("message", "found"),
    [
        ("tfdist launch: not restarted: the same error would come back.", True),
        ("CollectiveError: the workers ran different collectives at step …: …", True),
        ("lost contact with worker 1 at step 15", False),  # a value where the code has a placeholder
        ("the launcher could not start the workers because of a planetary alignment", False),
    ],
)
def test_what_counts_as_quoted(message: str, found: bool, source: str) -> None:
    assert all(piece in source for piece in pieces(message)) is found
