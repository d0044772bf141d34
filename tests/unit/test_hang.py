"""The hang check's decisions (tfdist.launcher.hang) and what a worker publishes for it
(tfdist.worker.progress), on records written as the workers write them."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from tfdist.cli.argtypes import seconds_or_off
from tfdist.launcher import hang
from tfdist.worker.contract import AttemptFiles
from tfdist.worker.progress import Progress, stacks, worker_rank


def steps(
    rank: str, n: int, inside: bool, last: float, longest: float = 0.1, done: bool = False
) -> hang.Steps:
    return hang.Steps(rank, n, inside, last, longest, done)


def test_the_bound_is_the_users_or_derived_from_the_steps() -> None:
    assert hang.bound(60.0, {}) == 60.0
    assert hang.bound(0.0, {"0": steps("0", 5, True, 0)}) is None  # off
    assert hang.bound(None, {}) is None  # no step yet: loading data is not a hang
    assert hang.bound(None, {"0": steps("0", 5, True, 0, longest=0.2)}) == hang.AUTO_MIN_S
    assert hang.bound(None, {"0": steps("0", 5, True, 0, longest=20.0)}) == 400.0
    assert hang.bound(None, {"0": steps("0", 5, True, 0, longest=90.0)}) == hang.AUTO_MAX_S


def test_the_worker_outside_any_step_is_the_one_the_others_wait_for() -> None:
    now = 1000.0
    found = {"0": steps("0", 9, True, now - 400), "1": steps("1", 8, False, now - 401)}
    assert hang.verdict(found, now, 300) == hang.Hang(401 - 1, "1", True)
    assert hang.verdict(found, now - 200, 300) is None  # moved 200 s ago: within the bound


def test_without_anyone_inside_a_step_the_fewest_steps_are_stuck() -> None:
    now = 1000.0
    found = {"0": steps("0", 5, False, now - 70), "1": steps("1", 4, False, now - 71)}
    assert hang.verdict(found, now, 60) == hang.Hang(70, "1", False)


def test_one_worker_busy_alone_after_its_peers_finished_is_not_a_hang() -> None:
    now = 1000.0
    found = {"0": steps("0", 9, False, now - 900), "1": steps("1", 9, False, now - 900, done=True)}
    assert hang.verdict(found, now, 300) is None
    found["0"] = steps("0", 9, True, now - 900)  # waiting inside a step for a peer that is gone
    assert hang.verdict(found, now, 300) == hang.Hang(900, "0", False)


def test_records_are_read_as_the_worker_writes_them(tmp_path: Path) -> None:
    progress = Progress(AttemptFiles(str(tmp_path)), "1")
    progress.enter()
    progress.leave()
    progress.enter()
    progress.publish()
    (tmp_path / "rank0.progress.json").write_text("{not json")  # being replaced: skipped
    read = hang.read_steps(str(tmp_path))
    assert list(read) == ["1"]
    assert read["1"].steps == 2 and read["1"].inside and not read["1"].done
    assert abs(read["1"].last - time.time()) < 5
    assert json.loads((tmp_path / "rank1.progress.json").read_text())["steps"] == 2


def test_a_stack_request_is_answered_with_the_main_thread_first(tmp_path: Path) -> None:
    attempt = AttemptFiles(str(tmp_path))
    progress = Progress(attempt, "3")
    progress.answer()
    assert not Path(attempt.stacks("3")).exists()  # not asked
    released = threading.Event()
    side = threading.Thread(target=released.wait, name="side", daemon=True)
    side.start()
    answerer = threading.Timer(0.3, progress.answer)  # the worker's thread, a tick later
    answerer.start()
    answers = hang.collect_stacks(str(tmp_path), ["3"], 10)  # the main thread waits here
    answerer.join()
    released.set()
    text = answers["3"]
    assert text.startswith("Thread MainThread (most recent call last):")
    assert "Thread side (most recent call last):" in text
    assert "test_a_stack_request_is_answered_with_the_main_thread_first" in text


def test_the_report_folds_library_frames_and_keeps_the_users() -> None:
    taken: list[str] = []
    side = threading.Timer(0.2, lambda: taken.append(stacks()))  # as the worker's thread takes them
    side.start()
    side.join()  # the main thread's innermost frame: a library's
    lines = hang.main_thread_frames(taken[0])
    mine = [line for line in lines if line.startswith(f"{__file__}:")]
    assert mine and "in test_the_report_folds_library_frames_and_keeps_the_users: side.join()" in mine[-1]
    assert lines[0].startswith(f"{__file__}:")  # pytest's frames before it: left out
    assert lines[1].startswith("… ") and lines[1].endswith("frame(s) in libraries")  # threading's
    assert "threading.py:" in lines[-1] and " in _wait_for_tstate_lock" in lines[-1]  # a library's, kept
    assert len(lines) <= hang.SHOWN_FRAMES


def test_the_rank_comes_from_the_launcher_or_the_mpi_launcher() -> None:
    assert worker_rank({"TFDIST_RANK": "2"}) == "2"
    assert worker_rank({"PMI_RANK": "5"}) == "5"
    assert worker_rank({}) is None


@pytest.mark.parametrize(("text", "value"), [("off", 0.0), ("OFF", 0.0), ("90", 90.0)])
def test_watchdog_timeout_takes_seconds_or_off(text: str, value: float) -> None:
    assert seconds_or_off(text) == value
