"""Which worker the launcher's report names when several fail together (tfdist.launcher.attempt._cause): the
one whose exception was recorded first, not the peer whose collective then failed and exited sooner."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from tfdist.launcher.attempt import _cause
from tfdist.worker.contract import AttemptFiles


def worker(attempt: Path, rank: int, recorded_at: float | None) -> Any:
    """A stand-in with what _cause reads (its environment); its error record written at ``recorded_at``."""
    if recorded_at is not None:
        path = AttemptFiles(str(attempt)).record("error", str(rank))
        Path(path).write_text('{"type": "ValueError", "message": "x"}')
        os.utime(path, (recorded_at, recorded_at))
    env = {"TFDIST_ATTEMPT_DIR": str(attempt), "TFDIST_RANK": str(rank)}
    return SimpleNamespace(spec=SimpleNamespace(env=env), name=f"w{rank}")


def test_the_peer_that_exited_first_is_not_the_cause_when_another_recorded_earlier(tmp_path: Path) -> None:
    raised = worker(tmp_path, 1, 1000.0)  # its callback raised, recorded, then tore down slowly
    peer = worker(tmp_path, 0, 1000.5)  # its collective failed once rank 1's connections closed
    assert _cause(peer, 1, [peer, raised]) is raised


def test_the_first_stays_the_cause_when_it_recorded_first(tmp_path: Path) -> None:
    first = worker(tmp_path, 0, 1000.0)
    later = worker(tmp_path, 1, 1001.0)
    assert _cause(first, 1, [first, later]) is first


def test_a_worker_killed_by_a_signal_or_without_a_record_stays_the_cause(tmp_path: Path) -> None:
    killed = worker(tmp_path, 0, None)
    peer = worker(tmp_path, 1, 1000.0)
    assert _cause(killed, -9, [killed, peer]) is killed  # out of memory: no record, and it is the cause
    silent = worker(tmp_path / "b", 0, None)
    (tmp_path / "b").mkdir(exist_ok=True)
    assert _cause(silent, 3, [silent, peer]) is silent  # sys.exit(3): nothing says another came first
