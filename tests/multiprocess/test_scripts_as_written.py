"""Scripts as written under tfdist launch: every worker joins the job or the user is told, failures show
the exception, MPI output names its rank."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from helpers.cli import tfdist

HELPERS = Path(__file__).parent.parent / "helpers"
NEVER_JOINS = str(HELPERS / "never_joins.py")


def launch(tmp_path: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return tfdist("launch", "--run-dir", str(tmp_path / "run"), *args, timeout=timeout)


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        ("mirrored", "every worker built MirroredStrategy: they train 2 separate models"),
        pytest.param(  # the same path as MirroredStrategy (a strategy that is not multi-worker): second tier
            "one_device",
            "every worker built OneDeviceStrategy: they train 2 separate models",
            marks=pytest.mark.slow,
        ),
        ("single_resolver", "every worker built MultiWorkerMirroredStrategy: they train 2 separate models"),
        (
            "no_strategy",
            "every worker built no strategy (the default strategy): they train 2 separate models",
        ),
    ],
)
def test_workers_that_never_join_get_one_warning(kind: str, expected: str, tmp_path: Path) -> None:
    proc = launch(tmp_path, "-n", "2", "--cpu", NEVER_JOINS, kind)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = proc.stdout + proc.stderr
    assert out.count("tfdist launch: warning:") == 1 and expected in out
    assert "use MultiWorkerMirroredStrategy or tfdist.strategy()" in out


def test_workers_that_join_get_no_warning(tmp_path: Path) -> None:
    proc = launch(tmp_path, "-n", "2", "--cpu", NEVER_JOINS, "mwms")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "warning" not in proc.stdout + proc.stderr


def test_strict_stops_a_job_that_does_not_join(tmp_path: Path) -> None:
    proc = launch(tmp_path, "-n", "2", "--cpu", "--strict", "--max-restarts", "2", NEVER_JOINS, "mirrored")
    assert proc.returncode == 1
    assert "--strict: every worker built MirroredStrategy" in proc.stdout + proc.stderr
    assert "trained" not in proc.stdout  # stopped before the training finished
    assert not (tmp_path / "run" / "attempt-1").exists()  # no restart: it would build the same strategy


FAILING = """
import os
for i in range(30):
    print(f"progress {i}", flush=True)

def build_batch():
    if (os.environ.get("TFDIST_RANK") or os.environ.get("PMI_RANK")) == "1":
        rows = "\\n".join(f"  tensor row {i}" for i in range(60))
        raise ValueError("Dimensions must be equal, but are 3 and 4\\n" + rows)

build_batch()
"""


@pytest.mark.parametrize("backend", ["tf", "mpi"])
def test_failure_report_shows_the_exception_and_where_it_was_raised(backend: str, tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(FAILING)
    proc = launch(tmp_path, "-n", "2", "--cpu", "--backend", backend, str(script))
    assert proc.returncode == 1
    report = proc.stderr + proc.stdout
    rank = "[r1] " if backend == "mpi" else ""
    assert f"  {rank}ValueError: Dimensions must be equal, but are 3 and 4\n" in report
    assert f"  at {script}:9 in build_batch\n" in report
    assert "tensor row 59" in report  # then the log's last lines


def test_mpi_output_lines_name_their_rank(tmp_path: Path) -> None:
    script = tmp_path / "hello.py"
    script.write_text("import os\nprint('hello from', os.environ['PMI_RANK'], flush=True)\n")
    proc = launch(tmp_path, "-n", "2", "--cpu", "--backend", "mpi", str(script))
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = set(proc.stdout.splitlines())
    assert {"[mpi]: [0] hello from 0", "[mpi]: [1] hello from 1"} <= lines
    for rank in range(2):  # and a log file per rank, as with the TensorFlow backend
        log = tmp_path / "run" / "attempt-0" / f"rank{rank}.log"
        assert f"hello from {rank}" in log.read_text().splitlines()
