"""A wedged worker ends the job by itself, and the report shows where it was: real workers, real
TensorFlow, a plain MultiWorkerMirroredStrategy script (tests/helpers/wedged_worker.py) whose worker 1
sleeps in a per-batch callback."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from helpers.cli import tfdist
from tfdist.launcher.hang import AUTO_MIN_S

SCRIPT = str(Path(__file__).parent.parent / "helpers" / "wedged_worker.py")
#: From the wedge to the launcher's exit beyond the bound: the hang check's 1 s tick, the stacks' answer (a
#: 1 s tick), the stop (4 s at most) and the interpreters' exit, on a loaded machine.
REPORT_S = 15.0


def launch(tmp_path: Path, *flags: str, mode: str = "fit", timeout: float = 180) -> tuple[str, float]:
    """The launch's report, and the seconds from the wedge to the launcher's exit."""
    proc = tfdist(
        "launch", "-n", "2", "--cpu", *flags, "--run-dir", str(tmp_path / "run"), SCRIPT, mode,
        timeout=timeout,
    )  # fmt: skip
    ended = time.time()
    assert proc.returncode == 124, proc.stderr
    wedged = float(re.search(r"wedged at ([\d.]+)", proc.stdout + proc.stderr)[1])  # type: ignore[index]
    return proc.stderr, ended - wedged


def assert_names_the_wedged_worker(report: str) -> None:
    assert "tfdist launch: w1 failed first: hung:" in report
    assert "w1 (outside any step while the others waited in one); its main thread" in report
    frames = report[report.index("its main thread") :].splitlines()
    assert any("wedged_worker.py" in f and "on_train_batch_end" in f for f in frames), report
    assert any("wedged_worker.py" in f and "time.sleep(3600)" in f for f in frames), report
    assert "rank*.stacks.txt" in report


def test_a_wedged_worker_ends_the_job_with_its_stack(tmp_path: Path) -> None:
    report, after = launch(tmp_path, "--watchdog-timeout", "8")
    assert_names_the_wedged_worker(report)
    assert after < 8 + REPORT_S, report
    stacks = (tmp_path / "run" / "attempt-0" / "rank1.stacks.txt").read_text()
    assert stacks.startswith("Thread MainThread (most recent call last):") and "time.sleep(3600)" in stacks


def test_a_wedged_horovod_rank_ends_the_job_with_its_stack(tmp_path: Path) -> None:
    """The MPI backend: one MPI launcher starts both ranks; the report names the rank."""
    report, after = launch(tmp_path, "--backend", "horovod", "--watchdog-timeout", "8", mode="hvd")
    assert "tfdist launch: rank 1 failed first: hung:" in report
    assert "rank 1 (outside any step while the others waited in one)" in report
    assert "wedged_worker.py:" in report and "time.sleep(3600)" in report
    assert after < 8 + REPORT_S, report


@pytest.mark.slow  # the first tier: the same report above, with a short bound
@pytest.mark.timeout(AUTO_MIN_S + 180)  # the default bound is longer than a test's usual limit
def test_with_default_flags_a_wedged_job_ends_by_itself(tmp_path: Path) -> None:
    report, after = launch(tmp_path, timeout=AUTO_MIN_S + 180)
    assert_names_the_wedged_worker(report)
    assert "the bound, 300 s, comes from the steps' times" in report
    assert AUTO_MIN_S <= after < AUTO_MIN_S + REPORT_S, report


@pytest.mark.slow  # the first tier: model.fit above
def test_a_wedged_custom_loop_ends_within_its_bound(tmp_path: Path) -> None:
    """A tutorial-style loop whose reduce runs eagerly: the waiting worker is outside any step too."""
    report, after = launch(tmp_path, "--watchdog-timeout", "60", mode="loop")
    assert "tfdist launch: w1 failed first: hung:" in report and "w1 (the fewest steps)" in report
    assert "time.sleep(3600)" in report
    assert 60 <= after < 60 + REPORT_S, report
