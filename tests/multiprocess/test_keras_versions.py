"""The Keras fix on a stack other than the default: TensorFlow 2.17 with Keras 3.5 (what pip installed
beside TF 2.17 when it came out), in a virtualenv of its own outside the repository
(``devtools/compat.py``: cached under ~/.cache/tfdist-compat, built here when missing).

Building the venv needs the package registry (about 250 MB, a few minutes). Without one this test fails,
naming the pip command that failed: a skipped test would hide that the stack went untested.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[2] / "devtools"))
import compat

sys.path.pop(0)

CELL = next(c for c in compat.CELLS if c.name == "tf2.17-keras3.5")


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_two_workers_equal_one_process_on_tf217_keras35() -> None:
    record = compat.run_cell(CELL, timeout=400, build_timeout=900)
    assert "error" not in record, f"{CELL.name}: {record['error']}"
    assert record["passed"], (
        f"{CELL.name}: weights differ by {record['max_weight_diff']:.2e} (> {compat.TOL})"
    )
    assert not record["warnings"], record["warnings"]
