"""The MPI backend's gradient buckets and 16-bit wire on 2 local ranks (each its own node: TFDIST_MPI_SHM=0,
so every sum crosses MPI as it does between hosts)."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from helpers.cli import tfdist

HELPERS = Path(__file__).parent.parent / "helpers"


def launch(out: Path, script: str, *args: str, env: dict[str, str], bind: str = "auto") -> None:
    argv = [
        "launch",
        "--backend",
        "mpi",
        "-n",
        "2",
        "--cpu",
        "--bind-to",
        bind,
        "--run-dir",
        str(out / "run"),
    ]
    proc = tfdist(
        *argv, str(HELPERS / script), str(out), *args, env={"TFDIST_MPI_SHM": "0", **env}, timeout=300
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


def test_horovod_fp16_compression_sends_half_the_bytes(tmp_path: Path) -> None:
    launch(tmp_path, "hvd_fp16_wire.py", env={})
    for rank in (0, 1):
        wire = json.loads((tmp_path / f"wire-{rank}.json").read_text())
        assert wire["none"]["dtype"] == "float32" and wire["fp16"]["dtype"] == "float16"
        assert wire["fp16"]["bytes"] * 2 == wire["none"]["bytes"] >= 400_000
        # Back in the tensor's own dtype; inputs rounded to float16, the sum rounded once more.
        assert wire["fp16"]["result_dtype"] == "float32"
        assert wire["fp16"]["max_rel_error"] <= 2 * 2.0**-11


@pytest.mark.parametrize(
    ("bucket_mb", "compression", "tolerance"),
    # Explicit buckets in the second tier: the first tier's auto case runs buckets turned on mid-run.
    [
        pytest.param("0.00003", "none", 1e-5, marks=pytest.mark.slow),
        pytest.param("0", "bf16", 5e-3, marks=pytest.mark.slow),
    ],
)
def test_buckets_and_compression_against_one_process(
    bucket_mb: str,
    compression: str,
    tolerance: float,
    one_process_reference: Callable[..., Path],
    tmp_path: Path,
) -> None:
    """Buckets change only when each sum starts: ≡ one process; bf16 stays within its stated error."""
    ranks = tmp_path / "ranks"
    ranks.mkdir()
    launch(ranks, "fit_probe.py", env={"TFDIST_BUCKET_MB": bucket_mb, "TFDIST_COMPRESSION": compression})
    w0, w1 = np.load(ranks / "weights-0.npy"), np.load(ranks / "weights-1.npy")
    assert np.array_equal(w0, w1)
    single = one_process_reference(HELPERS / "fit_probe.py")
    error = np.max(np.abs(w0 - np.load(single / "weights-0.npy")))
    assert error <= tolerance
    if compression != "none":
        assert error > 0  # the 16-bit wire really was used
    logs = (ranks / "run").rglob("*.log")
    said = "".join(p.read_text(errors="replace") for p in logs)
    assert f"gradients {compression}, buckets {float(bucket_mb)} MB" in said
    if float(bucket_mb):
        assert "4 gradient(s) in 3 bucket(s)" in said


@pytest.mark.slow  # the first tier: the fp16 wire above; buckets in test_shard_optimizer.py
def test_horovod_tape_gradients_in_buckets_equal_one_process(
    one_process_reference: Callable[..., Path], tmp_path: Path
) -> None:
    """Horovod's DistributedGradientTape across "nodes": each gradient's bucket is its own collective,
    submitted as the backward pass produces it; the training is still one process's."""
    ranks, single = tmp_path / "ranks", one_process_reference(HELPERS / "hvd_loop.py", "--batch", "64")
    ranks.mkdir()
    launch(ranks, "hvd_loop.py", env={"TFDIST_BUCKET_MB": "0.00003"})
    w0, w1, w_one = (
        np.load(path) for path in (ranks / "rank0.npz", ranks / "rank1.npz", single / "rank0.npz")
    )
    for name in w_one.files:
        assert np.array_equal(w0[name], w1[name])
        assert np.max(np.abs(w0[name] - w_one[name])) <= 1e-5, name
    said = "".join(p.read_text(errors="replace") for p in (ranks / "run").rglob("*.log"))
    assert "Horovod: 4 gradient(s) in 4 bucket(s)" in said, said[-3000:]


# The first tier: buckets in test_shard_optimizer.py; the auto decision's rule in tests/unit.
@pytest.mark.parametrize(
    ("share", "on"),
    [pytest.param("0.01", True, marks=pytest.mark.slow), pytest.param("1", False, marks=pytest.mark.slow)],
)
def test_auto_buckets_decided_from_the_first_steps(
    share: str, on: bool, one_process_reference: Callable[..., Path], tmp_path: Path
) -> None:
    """TFDIST_BUCKET_MB's default, auto: the first steps sum after the backward pass; at the first sync point
    past them every rank gathers the measured share of a step the sum took and the same decision follows
    everywhere. The threshold (TFDIST_BUCKET_AUTO_SHARE, 0.2 by default, unit-tested in
    test_compression.py) is set here where the measured share cannot miss it: 0.01 (the sum of 8 MB of
    gradients is far more of a step): the step is traced again in 2 MB buckets; 1 (a share can only reach
    it if the step is nothing but the sum): one sum throughout. ≡ one process either way."""
    ranks = tmp_path / "ranks"
    ranks.mkdir()
    if on and os.cpu_count() == 1:
        pytest.skip("auto takes buckets only where a rank has a core beside its backward pass")
    # Unbound: each rank has every core, so a core beside its backward pass.
    launch(ranks, "auto_buckets_fit.py", env={"TFDIST_BUCKET_AUTO_SHARE": share}, bind="none")
    w0, w1 = np.load(ranks / "weights-0.npy"), np.load(ranks / "weights-1.npy")
    assert np.array_equal(w0, w1)
    single = one_process_reference(HELPERS / "auto_buckets_fit.py")
    assert np.max(np.abs(w0 - np.load(single / "weights-0.npy"))) <= 1e-5
    said = "".join(p.read_text(errors="replace") for p in (ranks / "run").rglob("*.log"))
    assert "gradients none, buckets auto" in said, said[-3000:]
    found = re.search(
        r"auto buckets: the gradient sum took (\d+) % of a step .* ms on the slowest rank\), so (.*)", said
    )
    assert found and 0 < int(found.group(1)) < 100, said[-3000:]
    if on:
        assert found.group(2).startswith("2 MB buckets from now on"), said[-3000:]
        assert "6 gradient(s) in 2 bucket(s)" in said, said[-3000:]  # the step traced again, in buckets
    else:
        assert found.group(2).startswith("one sum after the backward pass"), said[-3000:]
        assert "bucket(s)" not in said, said[-3000:]
