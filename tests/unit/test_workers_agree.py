"""The pure decisions that let workers differ: one schedule from every worker's row, and how workers' own
data of unequal sizes make the job's steps."""

from __future__ import annotations

import numpy as np
import pytest

from tfdist.diagnose.peers import collective_error
from tfdist.errors import ConfigError
from tfdist.train.agreement import Schedule, agree, check_resumed, setup_row
from tfdist.train.uneven import INFINITE, UNKNOWN, OwnData, _agreed_batch, _steps, _worker_batch, digest

SAME = (3, 64, 6, 10, 0)  # epochs, batch, steps, log_every, initial_epoch


def table(*rows: np.ndarray) -> np.ndarray:
    return np.stack(rows)


def test_callback_needs_are_merged_and_the_chief_checkpoints() -> None:
    chief = setup_row(False, True, SAME, "/shared/ckpt", 50)
    other = setup_row(True, False, SAME, None, None)
    assert agree(table(chief, other)) == Schedule(True, True, "/shared/ckpt", 50)
    assert agree(table(other, other)) == Schedule(True, False, None, None)


def test_a_directory_on_the_chief_only_is_everyone_s_and_a_non_ascii_path_survives() -> None:
    path = "/scratch/jöb 7/backup"
    assert agree(table(setup_row(False, False, SAME, path, None), setup_row(False, False, SAME, None, None)))
    assert agree(table(setup_row(False, False, SAME, path, None))).checkpoint_dir == path


@pytest.mark.parametrize(
    ("index", "name"),
    [(0, "epochs"), (1, "batch size"), (2, "steps_per_epoch"), (3, "log_every"), (4, "initial_epoch")],
)
def test_settings_that_cannot_be_merged_are_one_line_naming_the_ranks(index: int, name: str) -> None:
    other = list(SAME)
    other[index] += 1
    rows = table(setup_row(False, False, SAME, None, None), setup_row(False, False, tuple(other), None, None))
    with pytest.raises(
        ConfigError, match=f"different {name} on the workers \\(rank 0: {SAME[index]}, rank 1"
    ):
        agree(rows)


def test_a_checkpoint_directory_on_another_worker_but_not_the_chief_is_refused() -> None:
    rows = table(setup_row(False, False, SAME, None, None), setup_row(False, False, SAME, "/x", 5))
    with pytest.raises(ConfigError, match=r"given on rank\(s\) 1 but not on the chief"):
        agree(rows)


def test_a_path_longer_than_the_row_is_refused() -> None:
    with pytest.raises(ConfigError, match="checkpoint_dir is 600 bytes long"):
        setup_row(False, False, SAME, "/" + "a" * 599, None)


def test_workers_that_resumed_from_different_steps_are_named() -> None:
    check_resumed(np.array([[1.0, 40.0], [1.0, 40.0]]), "/c")
    with pytest.raises(ConfigError, match="rank 0: step 40, rank 1: no checkpoint"):
        check_resumed(np.array([[1.0, 40.0], [0.0, 0.0]]), "/c")


def test_steps_are_the_longest_worker_s_and_padding_fills_the_others() -> None:
    own = OwnData(batch=24, workers=2, steps=5, cycle=False, counts=(96, 120))
    assert own.global_batch == 48
    assert own.padding(96) == 24 and own.padding(120) == 0
    cycling = OwnData(batch=24, workers=2, steps=6, cycle=True, counts=(100, 0))
    assert cycling.padding(100) == 20 and cycling.padding(0) == 24  # an empty worker still yields a batch


@pytest.mark.parametrize(
    ("cards", "steps", "expected"),
    [
        ([5, 3], None, 5),
        ([0, 2, 1], None, 2),
        ([INFINITE, INFINITE], 7, 7),
        ([UNKNOWN, 4], 3, 3),
        ([UNKNOWN, 4], None, None),  # learnt in the first epoch
    ],
)
def test_steps_of_the_workers_datasets(cards: list[int], steps: int | None, expected: int | None) -> None:
    assert _steps(cards, steps) == expected


@pytest.mark.parametrize(
    ("cards", "message"),
    [
        ([4, INFINITE], r"infinite on rank\(s\) 1 \(finite on 0\)"),
        ([INFINITE, INFINITE], r"infinite on rank\(s\) 0, 1: an epoch has no end"),
        ([0, 0], "every worker's own dataset is empty"),
    ],
)
def test_datasets_that_cannot_be_made_exact_are_one_line(cards: list[int], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        _steps(cards, None)


def test_batch_sizes_of_own_data() -> None:
    assert _worker_batch(64, 2) == 32
    with pytest.raises(ConfigError, match=r"batch_size=50 .* over the 3 workers.*use 48 or 51"):
        _worker_batch(50, 3)
    assert _agreed_batch(np.array([16.0, 0.0]), None, 2) == 16  # an empty worker declares nothing
    with pytest.raises(ConfigError, match="batched differently \\(rank 0: 16, rank 1: 32\\)"):
        _agreed_batch(np.array([16.0, 32.0]), None, 2)
    with pytest.raises(ConfigError, match="batched by 32, more than its share of batch_size=32"):
        _agreed_batch(np.array([32.0, 32.0]), 32, 2)


def test_the_digest_tells_different_arrays_apart() -> None:
    x = np.arange(12, dtype=np.float32).reshape(6, 2)
    assert digest([x, x[:, 0]]) == digest([x.copy(), x[:, 0].copy()])
    assert digest([x]) != digest([x + 1]) and digest([x]) != digest([x.reshape(3, 4)])
    assert all(float(h).is_integer() and 0 <= h < 2**32 for h in digest([x]))


def test_tensorflow_s_collective_errors_become_one_line() -> None:
    shape = ValueError(
        "Shape mismatch in the collective instance 100. Op at device /job:worker/task:0 expected shape [5] "
        "but another member in the group expected shape [387]. This is likely due to different input shapes"
    )
    line = collective_error(shape, 7, 0, 300.0)
    assert line is not None and line.startswith(
        "the workers ran different collectives at step 7: rank 0 sent [5]"
    )
    kind = RuntimeError(
        "Collective ops is aborted by: Collective instance 120 expected type 0 and data_type 1 but got "
        "type 0 and data_type 2"
    )
    assert "rank 1 met a all-reduce of float64 where it expected an all-reduce of float32" in (
        collective_error(kind, 3, 1, None) or ""
    )
    timed_out = RuntimeError("Collective has timed out waiting for other workers.")
    line = collective_error(timed_out, 9, 0, 5.0, lambda: {1: False, 2: True})
    assert line is not None and "TFDIST_COLLECTIVE_TIMEOUT=5 s on rank 0: rank(s) 1 had not arrived" in line
    assert "rank(s) 2 waited too" in line
    assert "another worker did not arrive" in (collective_error(timed_out, 9, 0, None) or "")
    assert collective_error(RuntimeError("Socket closed"), 1, 0, 5.0) is None
