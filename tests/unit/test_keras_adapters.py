"""The Keras adapter table: which row serves which release, the hint per TensorFlow, the docs table."""

from __future__ import annotations

import itertools
import json
import re
import sys
from pathlib import Path

import pytest

from tfdist.keras import adapters, fix

ROOT = Path(__file__).parents[2]


@pytest.mark.parametrize(
    ("version", "row"),
    [
        ("3.3.0", ">=3.3,<3.5"),
        ("3.3.3", ">=3.3,<3.5"),
        ("3.4.1", ">=3.3,<3.5"),
        ("3.5.0", ">=3.5,<3.7"),
        ("3.6.0", ">=3.5,<3.7"),
        ("3.7.0", ">=3.7,<3.8"),
        ("3.8.0", ">=3.8,<3.10"),
        ("3.9.2", ">=3.8,<3.10"),
        ("3.10.0", ">=3.10,<3.11"),
        ("3.11.3", ">=3.11,<3.16"),
        ("3.15.1", ">=3.11,<3.16"),
        ("3.15.2rc1", ">=3.11,<3.16"),
        ("3.2.1", None),
        ("3.0.5", None),
        ("3.16.0", ">=3.16,<3.17"),
        ("3.17.0", None),
        ("3.16.0.dev2026", ">=3.16,<3.17"),
        ("2.15.0", None),
        ("0", None),
    ],
)
def test_each_release_gets_its_row(version: str, row: str | None) -> None:
    adapter = adapters.adapter_for(version)
    assert (adapter.name if adapter else None) == row
    assert fix.keras_in_tested_range(version) is (row is not None)


@pytest.mark.parametrize(
    ("version", "build", "steps", "prev_backup", "variable", "grads"),
    [
        ("3.4.1", False, "enumerate_epoch", False, "KerasVariable", "none"),
        ("3.5.0", True, "enumerate_epoch", False, "KerasVariable", "sum"),
        ("3.7.0", True, "pairs", True, "Variable", "sum"),
        ("3.8.0", True, "pairs", True, "Variable", "scaled"),
        ("3.11.0", True, "triples", True, "Variable", "scaled"),
        ("3.15.1", True, "triples", True, "Variable", "scaled"),
    ],
)
def test_what_differs_between_releases(
    version: str, build: bool, steps: str, prev_backup: bool, variable: str, grads: str
) -> None:
    adapter = adapters.adapter_for(version)
    assert adapter is not None
    assert adapter.symbolic_build is build and adapter.epoch_steps == steps
    assert adapter.variable_class == variable and adapter.gradients == grads
    assert ("_prev_weights_path" in adapter.backup_paths) is prev_backup


def test_rows_are_contiguous_and_ordered() -> None:
    rows = adapters.ADAPTERS
    assert all(row.low < row.high for row in rows)
    assert all(a.high == b.low for a, b in itertools.pairwise(rows))
    assert adapters.supported_spec() == ">=3.3,<3.17"


@pytest.mark.parametrize(
    ("tf", "hint"),
    [
        ("2.16.2", "pip install 'keras>=3.3,<3.17'"),
        ("2.17.1", "pip install 'keras>=3.3,<3.17'"),
        ("2.18.1", "pip install 'keras>=3.5,<3.17'"),
        ("2.20.0", "pip install 'keras>=3.10,<3.17'"),
        ("2.21.0", "pip install 'keras>=3.12,<3.17'"),
        (None, "pip install 'keras>=3.3,<3.17'"),
    ],
)
def test_the_hint_names_a_keras_that_tensorflow_accepts(tf: str | None, hint: str) -> None:
    assert adapters.install_hint(tf) == hint


def test_the_refusal_is_one_line_with_what_where_and_how() -> None:
    line = adapters.unsupported_message("3.2.1", "/venv/lib/keras", "2.17.1")
    assert "\n" not in line
    assert line.startswith("Keras 3.2.1 (from /venv/lib/keras) beside TensorFlow 2.17.1 is outside")
    assert "Hint: pip install 'keras>=3.3,<3.17'" in line


def test_pyproject_pins_a_keras_of_the_table() -> None:
    pins = re.findall(r'"keras>=(\d+\.\d+),<(\d+\.\d+)"', (ROOT / "pyproject.toml").read_text())
    assert pins
    for low, high in pins:
        assert adapters.adapter_for(low) is not None
        assert adapters.version_tuple(high) <= adapters.supported_range()[1]


def test_the_docs_table_is_the_committed_results() -> None:
    sys.path.insert(0, str(ROOT / "devtools"))
    try:
        import compat
    finally:
        sys.path.pop(0)
    payload = json.loads((ROOT / "benchmarks" / "results" / "compat.json").read_text())
    doc = (ROOT / "docs" / "guides" / "keras-fit.md").read_text()
    block = compat.BLOCK.search(doc)
    assert block is not None and block.group(2) == compat.table(payload)
    assert {r["cell"] for r in payload["cells"]} == {c.name for c in compat.CELLS}
    for cell in compat.CELLS:  # every row's oldest and newest release is a cell
        assert cell.expect == ("equal" if adapters.adapter_for(cell.keras) else "refused")
    for row in adapters.ADAPTERS:
        served = sorted(v for v in (adapters.version_tuple(c.keras) for c in compat.CELLS) if row.covers(v))
        assert served[0] == row.low and (len(served) >= 2 or row.high == (row.low[0], row.low[1] + 1))
