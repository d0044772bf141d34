"""The ranks of Horovod's own suite (devtools/horovod_upstream.py rank) keep a run bounded: a test
in which one rank issues a collective the other never does fails on that rank after the per-test limit,
eagerly and inside a tf.function, its stacks are kept, and the tests after it pass on both ranks."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from helpers.cli import tfdist

RUNNER = Path(__file__).parents[2] / "devtools" / "horovod_upstream.py"
SUITE = """
import horovod.tensorflow as hvd
import tensorflow as tf


def test_first():
    assert float(hvd.allreduce(tf.ones([2]), op=hvd.Sum)[0]) == hvd.size()


def test_one_rank_only():
    if hvd.rank() == 0:
        hvd.allreduce(tf.ones([2]), name="lonely")


def test_one_rank_only_in_a_graph():
    @tf.function
    def reduce(x):
        return hvd.allreduce(x, name="lonely_in_a_graph")

    if hvd.rank() == 0:
        reduce(tf.ones([2]))


def test_after():
    assert float(hvd.allreduce(tf.ones([2]), op=hvd.Sum, name="lonely")[0]) == hvd.size()
"""


def outcomes(report: Path) -> dict[str, str]:
    found = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        failed = any(child.tag in ("failure", "error") for child in case)
        found[case.get("name", "?")] = "failed" if failed else "passed"
    return found


@pytest.mark.slow
def test_a_collective_one_rank_never_joins_fails_its_test_and_the_run_goes_on(tmp_path: Path) -> None:
    (tmp_path / "test_lonely.py").write_text(SUITE)
    args = ["--backend", "horovod", "-n", "2", "--cpu", "--timeout", "200"]
    args += ["--run-dir", str(tmp_path / "logs")]
    args += [str(RUNNER), "rank", str(tmp_path / "test_lonely.py"), str(tmp_path / "reports"), "8"]
    proc = tfdist("launch", *args, env={"TF_CPP_MIN_LOG_LEVEL": "2"}, timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rank0, rank1 = (outcomes(tmp_path / "reports" / f"rank{r}.xml") for r in (0, 1))
    lonely = {"test_one_rank_only": "failed", "test_one_rank_only_in_a_graph": "failed"}
    assert rank0 == {"test_first": "passed", **lonely, "test_after": "passed"}
    assert set(rank1.values()) == {"passed"} and len(rank1) == 4
    stuck = (tmp_path / "reports" / "rank0.stuck.txt").read_text()
    assert stuck.count("still running after 8 s") == 2 and "coordinator.py" in stuck
    assert not (tmp_path / "reports" / "rank1.stuck.txt").exists()
