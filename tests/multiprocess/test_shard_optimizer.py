"""Optimizer-state sharding on the MPI backend, real ranks under `tfdist launch --backend mpi`: each sharded
run equals one unsharded process (1e-5) for SGD with momentum, Adam with a learning-rate schedule, AdamW
and RMSprop, on 2 and 4 ranks, in one piece or in gradient buckets (each reduce-scattered by the
coordinator during the backward pass); a sharded checkpoint resumes on another rank count, and between
sharded and unsharded runs, as the uninterrupted run; a backend that cannot shard says so in one line and
writes nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from helpers.cli import tfdist

SCRIPT = str(Path(__file__).parent.parent / "helpers" / "shard_fit.py")
TOL = 1e-5
OPTIMIZERS = ("sgd", "adam", "adamw", "rmsprop")


def ranks(n: int, out: Path, *args: str, env: dict[str, str] | None = None, backend: str = "mpi") -> Path:
    """shard_fit.py on ``n`` ranks of ``backend``; asserts it succeeded."""
    out.mkdir(parents=True, exist_ok=True)
    proc = tfdist(
        "launch", "--backend", backend, "-n", str(n), "--cpu", "--run-dir", str(out / "logs"),
        SCRIPT, str(out), *args, env=env, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out


def one_process(out: Path, *args: str) -> Path:
    """shard_fit.py in one plain process (no launcher), unsharded unless ``args`` say otherwise."""
    out.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TFDIST_", "TF_CONFIG", "PMI_"))}
    env.update(TFDIST_RANK="0", TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run(
        [sys.executable, SCRIPT, str(out), *args], env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out


def assert_equal_runs(got: Path, n: int, reference: Path) -> float:
    """Every rank holds the same weights, equal to the reference's to TOL, with its history and iteration
    count; returns the largest weight difference."""
    weights = [np.load(got / f"weights-{r}.npy") for r in range(n)]
    for w in weights[1:]:
        assert np.array_equal(w, weights[0])
    want = np.load(reference / "weights-0.npy")
    diff = float(np.max(np.abs(weights[0] - want)))
    print(f"max abs difference from one process: {diff:.3g} ({n} ranks, {got.name})")  # shown with -s
    assert diff <= TOL, diff
    mine, theirs = (json.loads((d / "result-0.json").read_text()) for d in (got, reference))
    assert mine["iterations"] == theirs["iterations"] == 16
    for name, values in theirs["history"].items():
        assert np.allclose(mine["history"][name], values, rtol=1e-4, atol=1e-6), name
    return diff


@pytest.mark.slow  # the first tier: test_sharded_in_buckets_equals_one_process[2]
def test_adam_with_a_schedule_sharded_on_2_ranks_equals_one_process(
    one_process_reference: Callable[..., Path], tmp_path: Path
) -> None:
    """The first tier's one: TFDIST_SHARD_OPTIMIZER=1 (a script's switch), Adam whose rate follows a
    schedule of the optimizer's iterations, 63 weights in two shards of 32 (one padded)."""
    reference = one_process_reference(SCRIPT, "adam")
    got = ranks(2, tmp_path / "sharded", "adam", env={"TFDIST_SHARD_OPTIMIZER": "1"})
    assert_equal_runs(got, 2, reference)
    log = (tmp_path / "sharded" / "logs" / "attempt-0" / "mpi.log").read_text()
    assert "Traceback" not in log


#: 0.00005 MB: the test model's 252 bytes of gradients in 2 buckets ([bias 2, kernel 2], [bias 1, kernel 1]).
BUCKETS = ("--bucket-mb", "0.00005")


@pytest.mark.parametrize("n", [2, pytest.param(4, marks=pytest.mark.slow)])
def test_sharded_in_buckets_equals_one_process(
    n: int, one_process_reference: Callable[..., Path], tmp_path: Path
) -> None:
    """bucket_mb with sharding: each bucket reduce-scattered on its own by the coordinator's thread (one
    node: asked for, it still serves memory), each rank's shard its slice of every bucket."""
    reference = one_process_reference(SCRIPT, "adam")
    got = ranks(n, tmp_path / "sharded", "adam", "--shard", *BUCKETS)
    assert_equal_runs(got, n, reference)
    log = (tmp_path / "sharded" / "logs" / "attempt-0" / "mpi.log").read_text()
    assert "reduce-scattered as float32 in 2 buckets during the backward pass" in log, log[-3000:]


@pytest.mark.slow
@pytest.mark.parametrize("n", [2, 4])
@pytest.mark.parametrize("name", OPTIMIZERS)
def test_every_optimizer_sharded_equals_one_process(
    name: str, n: int, one_process_reference: Callable[..., Path], tmp_path: Path
) -> None:
    reference = one_process_reference(SCRIPT, name)
    assert_equal_runs(ranks(n, tmp_path / "sharded", name, "--shard"), n, reference)


#: The unsharded 16-bit wire's tolerance against exact (tests/multiprocess/test_buckets_wire.py, tests/
#: multihost/test_overlap.py).
WIRE_TOLERANCE = {"fp16": 1e-3, "bf16": 5e-3}


@pytest.mark.slow
@pytest.mark.parametrize(("compression", "name"), [("fp16", "adam"), ("bf16", "sgd")])
def test_the_16_bit_wire_sharded_stays_within_the_wire_s_tolerance(
    compression: str, name: str, one_process_reference: Callable[..., Path], tmp_path: Path
) -> None:
    """2 ranks, each its own node (TFDIST_MPI_SHM=0: every byte crosses MPI, so the wire applies), sharded
    and unsharded with the same compression: every rank holds the same weights, and the sharded run is
    within the tolerance the unsharded wire has against one exact process (and really lossy)."""
    reference = np.load(one_process_reference(SCRIPT, name) / "weights-0.npy")
    env = {"TFDIST_MPI_SHM": "0", "TFDIST_COMPRESSION": compression}
    errors, weights = {}, {}
    modes = {"sharded": ("--shard",), "sharded in buckets": ("--shard", *BUCKETS), "unsharded": ()}
    for mode, args in modes.items():
        out = ranks(2, tmp_path / mode.replace(" ", "-"), name, *args, env=env)
        w0, w1 = np.load(out / "weights-0.npy"), np.load(out / "weights-1.npy")
        assert np.array_equal(w0, w1)
        errors[mode], weights[mode] = float(np.max(np.abs(w0 - reference))), w0
    print(f"{compression} {name}: max abs difference from one exact process {errors}")  # shown with -s
    assert 0 < errors["sharded"] <= WIRE_TOLERANCE[compression], errors
    assert errors["unsharded"] <= WIRE_TOLERANCE[compression], errors
    # The same roundings, summed in the same order, whether the gradients travel in one piece or not.
    assert np.array_equal(weights["sharded in buckets"], weights["sharded"])
    log = (tmp_path / "sharded" / "logs" / "attempt-0" / "mpi.log").read_text()
    assert f"gradients reduce-scattered as {compression} in one piece" in log, log[-3000:]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("first", "then"),
    [
        ("2 sharded", "4 sharded"),
        ("2 sharded", "1 unsharded"),
        ("1 unsharded", "2 sharded"),
        ("2 bucketed", "4 sharded"),
        ("4 sharded", "2 bucketed"),
    ],
)
def test_a_checkpoint_resumes_across_rank_counts_and_sharding(
    first: str, then: str, one_process_reference: Callable[..., Path], tmp_path: Path
) -> None:
    """One epoch, then a second from its checkpoint with another rank count (and sharding on or off):
    the uninterrupted run's weights, optimizer iterations and history."""
    reference = one_process_reference(SCRIPT, "adam")
    checkpoint = str(tmp_path / "checkpoints")
    for part, (epochs, how) in enumerate(((1, first), (2, then))):
        count, mode = how.split()
        args = ("adam", "--epochs", str(epochs), "--checkpoint", checkpoint)
        args += {"sharded": ("--shard",), "bucketed": ("--shard", *BUCKETS), "unsharded": ()}[mode]
        out = tmp_path / f"part{part}"
        if count == "1":
            one_process(out, *args)
        else:
            ranks(int(count), out, *args)
    assert_equal_runs(out, int(count), reference)


@pytest.mark.slow
def test_sharding_on_the_tf_backend_is_one_line_and_writes_nothing(tmp_path: Path) -> None:
    checkpoint = tmp_path / "checkpoints"
    proc = tfdist(
        "launch", "--backend", "tf", "-n", "2", "--cpu", "--run-dir", str(tmp_path / "logs"),
        SCRIPT, str(tmp_path), "adam", "--shard", "--checkpoint", str(checkpoint), timeout=300,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr[-3000:]
    line = "ConfigError: shard_optimizer needs the mpi backend, but this run's backend is tf."
    assert line in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not checkpoint.exists() and not list(tmp_path.glob("weights-*.npy"))
