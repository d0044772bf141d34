"""No silent hang on the MPI backend: ranks that stop meeting end the job with one line naming the
collective and who had not arrived; Horovod's join lets ranks with uneven batches finish with Horovod's
result (tests/helpers/collective_timeout.py)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from helpers.cli import tfdist

HELPER = str(Path(__file__).parent.parent / "helpers" / "collective_timeout.py")
TIMEOUT_S = 5
# From entering the collective that never completes to every rank gone: the timeout, then the roll call and
# the teardown, which a loaded machine (the whole suite at once) stretches to ~18 s; a hang is minutes.
BOUND_S = TIMEOUT_S + 20


def run(argv: list[str], timeout_s: int = TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "TFDIST_COLLECTIVE_TIMEOUT": str(timeout_s)}
    return subprocess.run(argv, capture_output=True, text=True, timeout=240, env=env)


def launch(mode: str, out: Path, timeout_s: int = TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    args = ["--backend", "mpi", "-n", "2", "--cpu", "--run-dir", str(out / "run"), HELPER, mode, str(out)]
    env = {"TF_CPP_MIN_LOG_LEVEL": "2", "TFDIST_COLLECTIVE_TIMEOUT": str(timeout_s)}
    return tfdist("launch", *args, env=env, timeout=240)


# (mode, the rank whose wait is stuck, the line's pattern). "sync": both ranks wait, in different
# collectives, and either may be reported first.
CASES = [
    pytest.param(
        "sync",
        0,
        r"CollectiveError: (a barrier waited \d+ s on rank 0 at step 7 \(collective #2, "
        r"TFDIST_COLLECTIVE_TIMEOUT=5\): rank 1 had not arrived: it is waiting in an allgather|an allgather "
        r"waited \d+ s on rank 1 at step 7 \(collective #2, TFDIST_COLLECTIVE_TIMEOUT=5\): rank 0 had not "
        r"arrived: it is waiting in a barrier)",
        id="mpi-sync-skips-a-barrier",
    ),
    pytest.param(
        "hvd-uneven",
        1,
        r"CollectiveError: allreduce 'HorovodGroupedAllreduce_\w+' waited \d+ s on rank 1 \(collective #4, "
        r"TFDIST_COLLECTIVE_TIMEOUT=5\): rank 0 had not arrived: it did not answer within 2 s",
        id="horovod-uneven-batches-without-join",
        marks=pytest.mark.slow,  # the first tier: the same wait's report in the other two cases
    ),
    pytest.param(
        "fit-sleep",
        1,
        r"CollectiveError: the allgather of the votes to stop waited \d+ s on rank 0 .*: rank 1 had not "
        r"arrived: it did not answer within 2 s: busy outside any collective",
        id="fit-with-a-callback-sleeping-on-rank-1",
    ),
]


@pytest.mark.parametrize(("mode", "stuck_rank", "line"), CASES)
def test_ranks_that_stop_meeting_end_the_job_with_one_line(
    mode: str, stuck_rank: int, line: str, tmp_path: Path
) -> None:
    proc = launch(mode, tmp_path)
    ended = time.time()
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0, output[-3000:]
    assert "unreachable" not in output
    # The launcher's failure report quotes the worker's record: the error's type and line, not
    # TensorFlow's wrapper around an error raised inside a step.
    report = [ln for ln in output.splitlines() if ln.startswith("  [r")]
    assert report and re.search(line, report[0]), output[-3000:]
    stuck_at = float((tmp_path / f"stuck-{stuck_rank}.txt").read_text())
    assert ended - stuck_at < BOUND_S, f"ended {ended - stuck_at:.1f} s after the stuck collective began"


def test_under_mpiexec_alone_the_ranks_end_too(tmp_path: Path) -> None:
    """No tfdist launcher, no failure hook: the rank that timed out must not wait in MPI_Finalize for
    ranks that never get there (Hydra then ends the others)."""
    mpiexec = str(Path(sys.executable).parent / "mpiexec")
    started = time.monotonic()
    proc = run([mpiexec, "-n", "2", sys.executable, HELPER, "sync", str(tmp_path)], timeout_s=2)
    assert proc.returncode != 0
    assert "CollectiveError: " in proc.stderr and "had not arrived" in proc.stderr, proc.stderr[-3000:]
    assert time.monotonic() - started < 2 + BOUND_S


def reference(batches: dict[int, int], lr: float = 0.1) -> list[tuple[np.ndarray, np.ndarray]]:
    """Horovod's result for the helper's linear model after each step: the ranks' mean-squared-error
    gradients averaged over BOTH ranks, a joined rank adding zeros (float64)."""
    w = np.linspace(-0.3, 0.3, 4).reshape(4, 1)
    b = np.zeros(1)
    after = []
    for step in range(max(batches.values())):
        grads = []
        for rank, count in batches.items():
            if step >= count:  # joined: zeros
                grads.append((np.zeros_like(w), np.zeros_like(b)))
                continue
            x = np.random.default_rng(100 * rank + step).normal(size=(8, 4)).astype("float32").astype(float)
            error = x @ w + b - x.sum(axis=1, keepdims=True)
            grads.append((2 / 8 * x.T @ error, 2 / 8 * error.sum(axis=0)))
        w = w - lr * sum(g[0] for g in grads) / len(batches)
        b = b - lr * sum(g[1] for g in grads) / len(batches)
        after.append((w, b))
    return after


def test_join_lets_uneven_batches_finish_with_horovods_result(tmp_path: Path) -> None:
    proc = launch("join", tmp_path, timeout_s=60)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    steps = reference({0: 3, 1: 5})
    final = [np.load(tmp_path / f"join-{rank}.npz") for rank in (0, 1)]
    checks = [json.loads((tmp_path / f"join-{rank}.json").read_text()) for rank in (0, 1)]
    for rank in (0, 1):
        assert checks[rank]["last"] == 1  # join returns the rank that joined last
        assert checks[rank]["after"] == 3.0  # name counters restart in step after the join
        # Rank 1's weights after its 5 steps, broadcast to rank 0 after the join.
        assert np.allclose(final[rank]["kernel"], steps[4][0], atol=1e-5)
        assert np.allclose(final[rank]["bias"], steps[4][1], atol=1e-5)
    # A joined rank applies no update after its last batch (Horovod's join does not train it).
    assert np.allclose(final[0]["kernel_at_join"], steps[2][0], atol=1e-5)
    assert not np.allclose(steps[2][0], steps[4][0], atol=1e-3)  # the zero-contribution steps count
    assert checks[1]["average"] == 2.0  # (4 + rank 0's zero) / 2 ranks
    assert checks[1]["allgather"].startswith("Allgather is not supported with Join at this time.")
    assert "rank 0 already called hvd.join()" in checks[1]["allgather"]
