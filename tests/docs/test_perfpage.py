"""docs/performance.md's tables are what devtools/perfpage.py writes from the committed results: they cannot
go stale, and every section says when, on what and what ran."""

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
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_the_committed_tables_are_what_the_generator_writes(perfpage: ModuleType) -> None:
    committed = (ROOT / "docs" / "performance.md").read_text()
    assert committed == perfpage.render(committed), (
        "docs/performance.md is stale: python devtools/perfpage.py"
    )


def test_every_section_says_when_on_what_and_what_ran_and_has_a_written_table(perfpage: ModuleType) -> None:
    page = (ROOT / "docs" / "performance.md").read_text()
    for section in page.split("\n## ")[1:]:
        for label in ("- **When:** 20", "- **Machine:** ", "- **What ran:** ", "<!-- table: "):
            assert label in section, section.splitlines()[0]


def test_a_new_table_is_one_marker(perfpage: ModuleType, tmp_path: Path) -> None:
    (tmp_path / "new.json").write_text(
        json.dumps(
            {
                "finished": {"time": "2031-01-02T03:04:05"},
                "median_examples_per_sec": {"tfdist-fit": 1, "hvd-tape": 2},
            }
        )
    )
    marker = "<!-- table: side_by_side new.json tfdist-fit hvd-tape -->"
    table = "| x | y | z |\n|---|---|---|\n"
    page = f"# P\n\n## A new result\n\n- **When:** 2020-01-01\n\n{marker}\n{table}| old |\n"
    text = perfpage.render(page, tmp_path)
    assert "- **When:** 2031-01-02" in text and "| old |" not in text
    assert f"{marker}\n{table}" in text
    assert "| a Horovod `DistributedGradientTape` loop | 2 | 2.00x |" in text


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


def test_thread_cpu_groups_each_hosts_threads(perfpage: ModuleType) -> None:
    spent = {
        "rank/tf_Compute": 80.0,
        "rank/tf_Compute waiting": 8.0,
        "rank/python": 2.0,
        "rank/python waiting": 1,
    }
    spent |= {"launcher/python": 0.5, "hydra_pmi_proxy/hydra_pmi_proxy": 0.2, "mpiexec/mpiexec": 0.2}
    run = {"examples_per_sec": 1.0, "step": 120.0, "forward + backward": 80.0}
    run["cpu_ms_per_step"] = {"node0": spent, "node1": {**spent, "rank/tf_Compute": 90.0}}
    summary = {"cpus_per_host": 1, "places": {"two hosts, 1gbit": {"mpi-b0-n2-w2-r1": run}}}
    (row,) = perfpage.thread_cpu([summary], "now")
    assert row[:3] == ["now", "two hosts, 1 Gbit/s, 1 core(s) each", perfpage.config_words("mpi-b0-n2-w2-r1")]
    assert row[3:] == ["120 ms", "80 ms", "85.0 ms", "8.0 ms", "2.0 ms", "0.5 ms", "0.4 ms"]
