"""Horovod's elastic TensorFlow 2 examples (offline copies in tests/helpers) run unchanged under
`tfdist launch --backend horovod -n 2 --cpu`: the ranks hold the same state at every sync and commit and
end with equal weights; a rank lost after some commits, `--max-restarts 1`, resumes from the last one."""

from __future__ import annotations

import importlib.util
import json
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from helpers.cli import tfdist

HELPERS = Path(__file__).parent.parent / "helpers"
KERAS_MNIST = [str(HELPERS / "hvd_elastic_keras_mnist.py")]
MNIST = [str(HELPERS / "hvd_elastic_mnist.py")]
BENCHMARK = [
    *(str(HELPERS / "hvd_elastic_synthetic_benchmark.py"), "--no-cuda", "--model", "MobileNetV2"),
    *("--image-size", "32", "--batch-size", "4", "--num-warmup-batches", "2"),
    *("--num-batches-per-iter", "2", "--num-iters", "3"),
]

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("horovod") is not None,
    reason="Horovod is installed here: --backend horovod runs Horovod itself",
)


def launch(tmp_path: Path, script: list[str], *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "out").mkdir()
    env = {"TF_CPP_MIN_LOG_LEVEL": "2", "HVD_ELASTIC_OUT": str(tmp_path / "out"), **env}
    argv = ("launch", "--backend", "horovod", "-n", "2", "--cpu", "--run-dir", str(tmp_path / "run"))
    proc = tfdist(*argv, *args, *script, env=env, cwd=tmp_path, timeout=240)  # checkpoints go to the cwd
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def records(tmp_path: Path, rank: int) -> list[dict[str, Any]]:
    """Rank ``rank``'s syncs and commits, in order (tests/helpers/hvd_elastic_probe.py)."""
    lines = (tmp_path / "out" / f"rank{rank}.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def assert_ranks_agree(tmp_path: Path) -> None:
    steps = [[(r["event"], r["attempt"], r["trainable"]) for r in records(tmp_path, rank)] for rank in (0, 1)]
    assert steps[0] == steps[1]  # the same weights and optimizer at every sync and commit
    w0, w1 = (np.load(tmp_path / "out" / f"rank{rank}.npz") for rank in (0, 1))
    assert all(np.array_equal(w0[k], w1[k]) for k in w0.files) and len(w0.files) > 4


# Second tier: the first tier's test below runs the Keras example on this path (its first attempt) and
# TensorFlowKerasState's commits and syncs, which all three examples use.
@pytest.mark.slow
@pytest.mark.parametrize(
    ("script", "commits", "last"),
    [
        (KERAS_MNIST, 15, {"epoch": 3, "batch": 0}),  # 3 epochs of 4 batches: one commit each, and per epoch
        (MNIST, 6, {"batch": 5}),  # 12 // 2 batches, a commit after each
        (BENCHMARK, 12, {"iter": 2, "warm": True}),  # 2 warm-up batches, 3 iterations of 2: each + iter
    ],
    ids=["keras_mnist", "mnist", "synthetic_benchmark"],
)
def test_elastic_example_runs_unchanged_and_ranks_agree(
    script: list[str], commits: int, last: dict[str, Any], tmp_path: Path
) -> None:
    launch(tmp_path, script)
    assert_ranks_agree(tmp_path)
    rank0 = records(tmp_path, 0)
    assert [r["event"] for r in rank0] == ["sync"] + ["commit"] * commits
    assert last.items() <= rank0[-1]["objects"].items()


def test_a_lost_rank_resumes_from_the_last_commit(tmp_path: Path) -> None:
    """Rank 1 exits (code 3) right after its 7th commit, at batch 1 of epoch 1 (of 0-2): the restarted
    attempt starts from rank 0's last commit (the same objects and variables) and ends with 3 epochs."""
    proc = launch(tmp_path, KERAS_MNIST, "--max-restarts", "1", HVD_ELASTIC_CRASH_AFTER="7")
    assert "exited with code 3" in proc.stdout + proc.stderr
    assert "resuming from the last commit" in proc.stdout + proc.stderr
    assert_ranks_agree(tmp_path)
    rank0 = records(tmp_path, 0)
    first = [r for r in rank0 if r["attempt"] == 0]
    resumed = next(r for r in rank0 if r["attempt"] == 1)
    assert resumed["event"] == "sync" and first[-1]["event"] == "commit"
    assert resumed["objects"] == first[-1]["objects"] == {"epoch": 1, "batch": 1}
    assert resumed["digest"] == first[-1]["digest"]  # every model and optimizer variable as committed
    assert rank0[-1]["objects"] == {"epoch": 3, "batch": 0}
