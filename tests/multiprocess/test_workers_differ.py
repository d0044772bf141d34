"""Workers that differ: callbacks on the chief only, a callback that raises on one worker, and each worker
with data of its own in unequal amounts. Every case ends as one process would (weights, history,
iterations to 1e-5) or with the worker's own error, never in a hang."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from helpers.cli import TFDIST

HELPERS = Path(__file__).parent.parent / "helpers"
DIFFER = str(HELPERS / "workers_differ.py")
UNEVEN = str(HELPERS / "uneven_fit.py")
CALLBACK_SCENARIOS = (
    "tensorboard_batch",
    "tensorboard_n",
    "checkpoint_epoch",
    "checkpoint_n",
    "csv",
    "early_stopping",
    "batch_logger",
    "backup",
)
UNEVEN_SCENARIOS = (
    "arrays_one_batch_more",
    "arrays_partial",
    "arrays_steps_given",
    "dataset_cardinality",
    "dataset_shard_off",
    "dataset_empty_worker",
    "dataset_unknown_length",
)
TOL = 1e-5


def launch(backend: str, workers: int, tmp_path: Path) -> list[str]:
    return [
        *TFDIST,
        "launch",
        "-n",
        str(workers),
        "--cpu",
        "--backend",
        backend,
        "--run-dir",
        str(tmp_path / "logs"),
    ]


def run(cmd: list[str], timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def ok(proc: subprocess.CompletedProcess) -> None:
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]


def load(out: Path, name: str, rank: int) -> tuple[np.ndarray, dict]:
    return np.load(out / f"{name}.rank-{rank}.weights.npy"), json.loads(
        (out / f"{name}.rank-{rank}.json").read_text()
    )


def assert_same_run(ref: dict, got: dict, name: str) -> None:
    assert got["iterations"] == ref["iterations"], name
    assert set(got["history"]) == set(ref["history"]), name
    for key, values in ref["history"].items():
        np.testing.assert_allclose(got["history"][key], values, atol=TOL, rtol=0, err_msg=f"{name} {key}")


@pytest.fixture(scope="module")
def one_process(one_process_reference: Callable[..., Path]) -> Path:
    """The chief-only scenarios in one process: every callback runs there."""
    return one_process_reference(DIFFER)


# The second tier: the first tier's model.fit with file-writing callbacks is test_keras_fit.py's, and its
# uneven batches test_collective_timeout.py's join.
BOTH = [pytest.param("tf", marks=pytest.mark.slow), pytest.param("mpi", marks=pytest.mark.slow)]


@pytest.mark.parametrize("backend", BOTH)
def test_chief_only_callbacks_equal_one_process(backend: str, one_process: Path, tmp_path: Path) -> None:
    """TensorBoard (per batch, every 4), ModelCheckpoint (epoch, every 4 steps), CSVLogger, EarlyStopping, a
    per-batch logger and BackupAndRestore given to rank 0 only: both workers end as one process did, and
    the chief's callbacks saw the same logs and wrote their files."""
    out = tmp_path / "out"
    ok(run([*launch(backend, 2, tmp_path), DIFFER, str(out)]))
    for name in CALLBACK_SCENARIOS:
        w_ref, ref = load(one_process, name, 0)
        for rank in (0, 1):
            w, got = load(out, name, rank)
            np.testing.assert_allclose(w, w_ref, atol=TOL, rtol=0, err_msg=name)
            assert_same_run(ref, got, name)
    _, ref = load(one_process, "batch_logger", 0)
    _, got = load(out, "batch_logger", 0)
    assert [e[0] for e in got["events"]] == [e[0] for e in ref["events"]] and len(ref["events"]) == 24
    for want, have in zip(ref["events"], got["events"], strict=True):
        for key, value in want[1].items():
            assert abs(have[1][key] - value) <= TOL, (want, have)
    assert load(out, "early_stopping", 1)[1]["iterations"] == 12  # stopped after epoch 2 on both workers
    assert list((out / "tensorboard_n" / "tb" / "train").glob("events.out.tfevents.*"))
    assert len((out / "csv" / "log.csv").read_text().splitlines()) == 5  # header + 4 epochs
    assert sorted(p.name for p in (out / "checkpoint_epoch").glob("*.keras")) == [
        f"m-{e}.keras" for e in (1, 2, 3, 4)
    ]
    assert (out / "checkpoint_n" / "w.weights.h5").is_file()
    assert list((out / "backup" / "backup").glob("ckpt-*.index"))


# tf in the second tier: the first tier's failures on the TF backend are test_launch.py's.
@pytest.mark.parametrize("backend", [pytest.param("tf", marks=pytest.mark.slow), "mpi"])
def test_a_callback_that_raises_on_one_worker_is_the_reported_failure(backend: str, tmp_path: Path) -> None:
    """Rank 1's callback raises at epoch 1, batch 3: the launch reports rank 1's own exception (not a
    collective error of rank 0) and every process is gone within the launcher's grace period."""
    started = time.monotonic()
    proc = run([*launch(backend, 2, tmp_path), DIFFER, str(tmp_path / "out"), "--raise-on", "1"], 120)
    elapsed = time.monotonic() - started
    text = proc.stdout + proc.stderr
    assert proc.returncode != 0, text[-3000:]
    report = text[text.index("failed first") :]
    assert "ValueError: the user's callback failed on rank 1 at batch 3" in report.splitlines()[1], report
    assert elapsed < 60, elapsed


def uneven_reference(tmp_path_factory: pytest.TempPathFactory, workers: int) -> Path:
    out = tmp_path_factory.mktemp(f"reference{workers}")
    ok(run([sys.executable, UNEVEN, str(out), str(workers), "--reference"]))
    return out


@pytest.fixture(scope="module")
def two_worker_reference(one_process_reference: Callable[..., Path]) -> Path:
    """Keras' model.fit in one process on the global batches of two workers' data."""
    return one_process_reference(UNEVEN, "2", "--reference")


def check_uneven(reference: Path, out: Path, workers: int) -> None:
    for name in UNEVEN_SCENARIOS:
        w_ref, ref = load(reference, name, 0)
        for rank in range(workers):
            w, got = load(out, name, rank)
            np.testing.assert_allclose(w, w_ref, atol=TOL, rtol=0, err_msg=name)
            assert_same_run(ref, got, name)
            for key, value in ref["evaluate"].items():
                assert abs(got["evaluate"][key] - value) <= TOL, (name, key)
            np.testing.assert_allclose(got["predict"], ref["predict"], atol=TOL, rtol=0, err_msg=name)


@pytest.mark.parametrize("backend", BOTH)
def test_uneven_own_data_on_two_workers_equals_one_process(
    backend: str, two_worker_reference: Path, tmp_path: Path
) -> None:
    """Each worker's own arrays or dataset, one batch more, partial batches, an empty worker, auto-shard OFF,
    steps_per_epoch given, a length no worker knows (a filter): fit, evaluate and predict equal Keras'
    model.fit in one process on the global batches those data make."""
    out = tmp_path / "out"
    out.mkdir()
    ok(run([*launch(backend, 2, tmp_path), UNEVEN, str(out), "2"]))
    check_uneven(two_worker_reference, out, 2)


@pytest.mark.slow
def test_uneven_own_data_on_three_workers_equals_one_process(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    """The same on three MPI ranks (each with another amount of data)."""
    out = tmp_path / "out"
    out.mkdir()
    ok(run([*launch("mpi", 3, tmp_path), UNEVEN, str(out), "3"]))
    check_uneven(uneven_reference(tmp_path_factory, 3), out, 3)


def test_a_dataset_infinite_on_one_worker_only_is_one_line(tmp_path: Path) -> None:
    """What cannot be exact is said at set-up, on every worker, as a user error (exit 2), not a hang."""
    script = tmp_path / "infinite.py"
    script.write_text(
        "import numpy as np, tfdist\n"
        "strategy = tfdist.strategy()\n"
        "import keras, tensorflow as tf\n"
        "with strategy.scope():\n"
        "    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])\n"
        "    model.compile(optimizer='sgd', loss='mse')\n"
        "ds = tf.data.Dataset.from_tensor_slices((np.ones((8, 2), 'float32'), np.ones((8, 1), 'float32')))\n"
        "ds = ds.batch(4)\n"
        "if tfdist.rank() == 1:\n"
        "    ds = ds.repeat()\n"
        "tfdist.fit(model, ds, epochs=1, verbose=0)\n"
    )
    started = time.monotonic()
    proc = run([*launch("mpi", 2, tmp_path), str(script)], 120)
    text = proc.stdout + proc.stderr
    assert proc.returncode == 2, text[-3000:]
    assert "the workers' own datasets are infinite on rank(s) 1 (finite on 0)" in text, text[-3000:]
    assert "Traceback" not in text, text[-3000:]
    assert time.monotonic() - started < 60


MISMATCH = str(HELPERS / "mismatch_fit.py")


@pytest.mark.parametrize(
    ("backend", "mode", "expected"),
    [
        # Either rank may be the first to see it.
        ("tf", [], r"CollectiveError: the workers ran different collectives at step 9: rank [01] met a"),
        pytest.param("tf", ["--sleep"], r"on rank 0: rank\(s\) 1 had not arrived", marks=pytest.mark.slow),
        ("mpi", [], r"CollectiveError: the ranks ran different collectives at step \d+: rank 0 was in the"),
        # A rank sleeping in tfdist.fit on MPI: in the first tier as test_collective_timeout.py fit-sleep.
        pytest.param(
            "mpi",
            ["--sleep"],
            r"waited 5 s on rank 0 .*: rank 1 had not arrived: it did not answer",
            marks=pytest.mark.slow,
        ),
    ],
)
def test_a_program_whose_workers_stop_meeting_ends_with_one_line(
    backend: str, mode: list[str], expected: str, tmp_path: Path
) -> None:
    """Rank 0's own callback runs a collective the others do not, or rank 1's sleeps a minute: the job
    ends within the collective timeout (5 s) plus the launcher's grace (10 s), the report's line names the
    step and the rank the others waited for."""
    env = {**os.environ, "TFDIST_COLLECTIVE_TIMEOUT": "5"}
    started = time.monotonic()
    proc = subprocess.run(
        [*launch(backend, 2, tmp_path), MISMATCH, *mode], capture_output=True, text=True, timeout=120, env=env
    )
    elapsed = time.monotonic() - started
    text = proc.stdout + proc.stderr
    assert proc.returncode != 0, text[-3000:]
    report = text[text.index("failed first") :].splitlines()
    assert re.search(expected, report[1]), report[:3]
    assert elapsed < 45, elapsed  # start-up (~5 s) + one epoch + 5 s + 10 s grace, with room for a slow day
