"""README.md and the user pages of the docs speak to users: no commit hashes and no paths into the test
suite, which a reader cannot act on. docs/development.md and docs/architecture.md, written for those who
change tfdist, may cite both. HTML comments (the example directives) are not shown, so they are not read."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FOR_CONTRIBUTORS = {"docs/development.md", "docs/architecture.md"}
#: 7 to 40 hexadecimal digits standing alone, with at least one digit and one letter: ``2b64a33``, not
#: ``1234567`` (a number) or ``deadbeef`` and ``facade`` (words); not part of a longer word or path.
COMMIT = re.compile(r"(?<![\w/.#@:-])(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}(?![\w-])", re.I)
TEST_PATH = re.compile(r"(?<![\w.-])tests/")
COMMENT = re.compile(r"<!--.*?-->", re.S)


def user_pages() -> list[Path]:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    return [p for p in pages if p.relative_to(ROOT).as_posix() not in FOR_CONTRIBUTORS]


def findings(text: str) -> list[str]:
    """``line: what`` for every commit-like string and test-suite path in ``text`` (comments left out)."""
    shown = COMMENT.sub(lambda m: "\n" * m.group().count("\n"), text)
    found = []
    for number, line in enumerate(shown.splitlines(), 1):
        found += [f"{number}: commit-like {m.group()!r}" for m in COMMIT.finditer(line)]
        found += [
            f"{number}: test path {line[m.start() : m.start() + 40]!r}" for m in TEST_PATH.finditer(line)
        ]
    return found


@pytest.mark.parametrize("page", user_pages(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_no_commit_hashes_or_test_paths(page: Path) -> None:
    found = findings(page.read_text())
    assert not found, f"{page.relative_to(ROOT)}:\n" + "\n".join(found)


@pytest.mark.parametrize(
    ("text", "caught"),
    [
        ("at commit 2b64a33 the wire", True),
        ("(da3b21e, 5 repeats)", True),
        ("horovod_commit: 2626dc87a3a8eb8fb7d2216198ce45bce0f9e65a", True),
        ("see `tests/multihost/test_ray.py`", True),
        ("(tests/unit)", True),
        ("1234567 examples, 4,799,528 bytes, 1e-5", False),
        ("a facade, deadbeef, accede, decade", False),
        ("keras-team/keras#20585 and ray#47464", False),
        ("image registry.example.com/ml/tfdist:2.21@sha256:abc", False),
        ("colour #3f51b5 and my-tests/ folder, unittests/", False),
        ("<!-- example: skip needs a cluster (tests/multihost/test_ray.py starts one) -->", False),
    ],
)
def test_what_counts(text: str, caught: bool) -> None:
    assert bool(findings(text)) is caught, findings(text)
