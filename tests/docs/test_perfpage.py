"""docs/performance.md is what devtools/perfpage.py writes from the committed results: it cannot go stale,
and every section says when, on what and what ran."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def perfpage() -> ModuleType:
    spec = importlib.util.spec_from_file_location("perfpage", ROOT / "devtools" / "perfpage.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_the_committed_page_is_what_the_generator_writes(perfpage: ModuleType) -> None:
    committed = (ROOT / "docs" / "performance.md").read_text()
    assert committed == perfpage.render(), "docs/performance.md is stale: python devtools/perfpage.py"


def test_every_section_says_when_on_what_and_what_ran(perfpage: ModuleType) -> None:
    page = (ROOT / "docs" / "performance.md").read_text()
    sections = page.split("\n## ")[1:]
    assert len(sections) == len(perfpage.RESULTS)
    for section in sections:
        for label in ("- **When:** 20", "- **Machine:** ", "- **What ran:** "):
            assert label in section, section.splitlines()[0]


def test_a_new_result_is_one_entry(perfpage: ModuleType, tmp_path: Path) -> None:
    (tmp_path / "new.json").write_text(
        json.dumps(
            {"finished": {"time": "2031-01-02T03:04:05"}, "median_examples_per_sec": {"a": 100, "b": 50}}
        )
    )
    entry = perfpage.Result(
        title="A new result",
        sources=("new.json",),
        setup="what ran",
        machine="a machine",
        command="tfdist bench",
        table=perfpage.side_by_side({"a": "one way", "b": "another way"}),
    )
    text = "\n".join(perfpage.section(entry, tmp_path))
    assert "## A new result" in text and "- **When:** 2031-01-02" in text
    assert "| another way | 50 | 0.50x |" in text


@pytest.mark.parametrize(
    ("name", "words"),
    [
        ("local-w1-r1", "1 worker"),
        ("mpi-w2-r1", "MPI backend (`--backend mpi`), 2 workers"),
        ("mpi-b2-n2-w2-r1", "MPI backend, 2 MB buckets (`--bucket-mb 2`)"),
        ("something-new-w2-r1", "`something-new-w2-r1`"),
    ],
)
def test_configuration_names_read_as_words(perfpage: ModuleType, name: str, words: str) -> None:
    assert perfpage.config_words(name) == words
