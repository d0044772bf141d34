"""hvd.elastic's pure parts (no TensorFlow): ObjectState's commit / restore / sync, ``run``'s reset loop,
and the commit file a restarted attempt resumes from."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest

from tfdist.horovod import elastic


@pytest.fixture(autouse=True)
def fresh_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each state below stands for the first one of a fresh process: its index counts from 0 again."""
    monkeypatch.setattr(elastic, "_STATE_INDEX", itertools.repeat(0))


def state(rank: int = 0, root: dict[str, Any] | None = None, **objects: Any) -> elastic.ObjectState:
    """An ObjectState of rank ``rank``; ``root``: rank 0's objects, which the fake broadcast hands over."""
    return elastic.ObjectState(lambda obj: obj if root is None else root, lambda: rank, **objects)


def test_commit_restore_sync_as_horovods_object_state() -> None:
    s = state(epoch=1, batch=[0])
    s.epoch, s.batch = 2, [5]
    s.restore()  # back to the last commit (the constructor's values)
    assert (s.epoch, s.batch) == (1, [0])
    s.epoch = 3
    s.commit()
    s.epoch = 4
    s.restore()
    assert s.epoch == 3
    other = state(rank=1, root={"epoch": 7, "batch": [1]}, epoch=0, batch=[])
    other.sync()  # rank 0's committed objects, as attributes
    assert (other.epoch, other.batch) == (7, [1])


def test_run_restores_after_an_internal_error_and_keeps_state_after_a_hosts_update() -> None:
    s, calls, resets = state(epoch=0), [], []
    s.register_reset_callbacks([lambda: resets.append(s.epoch)])

    @elastic.run
    def train(st: elastic.ObjectState, errors: list[Exception]) -> str:
        calls.append(st.epoch)
        st.epoch += 1
        if errors:
            raise errors.pop(0)
        return "done"

    assert train(s, [elastic.HorovodInternalError("lost"), elastic.HostsUpdatedInterrupt(True)]) == "done"
    assert calls == [0, 0, 1]  # restored to the commit after the error, kept after the hosts update
    assert resets == [0, 1]


def test_commit_file_round_trip(tmp_path: Path) -> None:
    path = str(tmp_path / "c.pkl")
    assert elastic.read_commit(path) is None
    elastic.write_commit(path, {"size": 2, "state": {"objects": {"epoch": 3}}})
    assert elastic.read_commit(path) == {"size": 2, "state": {"objects": {"epoch": 3}}}
    assert [p.name for p in tmp_path.iterdir()] == ["c.pkl"]  # no temporary file left
    assert elastic.commit_path(0, {}) is None  # no launcher: memory only
    assert elastic.commit_path(1, {"TFDIST_RUN_DIR": "/r"}) == "/r/hvd-elastic-state-1.pkl"


def test_a_restarted_attempt_resumes_from_rank_0s_last_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TFDIST_RUN_DIR", str(tmp_path))
    monkeypatch.setenv("TFDIST_RESTART_COUNT", "0")
    first = state(epoch=0, batch=0)
    elastic.run(lambda s: None)(first)
    first.epoch, first.batch = 2, 5
    first.commit()
    state(rank=1, epoch=9).commit()  # other ranks write nothing
    assert elastic.read_commit(str(tmp_path / "hvd-elastic-state-0.pkl")) == {
        "size": 1,
        "state": {"objects": {"epoch": 2, "batch": 5}},
    }

    monkeypatch.setenv("TFDIST_RESTART_COUNT", "1")
    seen, resets = [], []
    restarted = state(epoch=0, batch=0)
    restarted.register_reset_callbacks([lambda: resets.append(1)])
    elastic.run(lambda s: seen.append((s.epoch, s.batch)))(restarted)
    assert seen == [(2, 5)] and resets == []  # the same number of ranks: no reset callbacks

    monkeypatch.setattr(elastic, "_size", lambda: 3)  # restarted on 3 ranks
    resized = state(epoch=0, batch=0)
    resized.register_reset_callbacks([lambda: resets.append(resized.epoch)])
    elastic.run(lambda s: None)(resized)
    assert resets == [2]  # after the commit is loaded, as Horovod's after a worker joined or left

    monkeypatch.delenv("TFDIST_RUN_DIR")  # no run directory: nothing read
    fresh = state(epoch=0, batch=0)
    elastic.run(lambda s: None)(fresh)
    assert fresh.epoch == 0
