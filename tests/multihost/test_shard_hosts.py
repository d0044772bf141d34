"""A sharded optimizer across two test hosts (one MPI rank each, `tfdist launch --nnodes 2 --rdzv`): every
reduce-scatter and all-gather crosses the hosts' link. Sharded Adam equals one unsharded process (1e-5)
with the backend's default (TFDIST_BUCKET_MB auto: one piece for a shard) and in 2 buckets
reduce-scattered during the backward pass; with the 16-bit wire it
stays within the wire's tolerance, every rank holding the same weights. Second tier:
tests/multiprocess/test_shard_optimizer.py runs the same cases on local ranks."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from hostcluster import Hosts, finish

SCRIPT = str(Path(__file__).parent.parent / "helpers" / "shard_fit.py")
#: Exact without compression; the unsharded 16-bit wire's tolerance against exact (tests/multihost/
#: test_overlap.py) with it.
TOLERANCE = {"none": 1e-5, "fp16": 1e-3}
_ports = itertools.count(29960)


def sharded_on_two_hosts(
    hosts: Hosts, tmp_path: Path, compression: str, bucket_mb: str
) -> tuple[list[np.ndarray], str]:
    """shard_fit.py (Adam with a schedule, ``--shard``) as one job of one rank on node1 and one on node2;
    every rank's weights and every log the job wrote."""
    out = tmp_path / "out"
    out.mkdir()
    env = {"TFDIST_RDZV_TOKEN": "shard-hosts-41d9", "TFDIST_COMPRESSION": compression}
    env.update({"TFDIST_BUCKET_MB": bucket_mb} if bucket_mb else {})
    endpoint = f"node1:{next(_ports)}"
    common = ["--nnodes", "2", "--rdzv", endpoint, "--rdzv-timeout", "120", "--cpu", "--backend", "mpi"]
    procs = []
    for i in (2, 1):  # the endpoint's node last: the other waits for it
        run = ["--run-dir", str(tmp_path / f"run-node{i}"), SCRIPT, str(out), "adam", "--shard"]
        procs.append(hosts.launch_on(f"node{i}", *common, *run, env=env))
    results = finish(procs)
    for code, output in results:
        assert code == 0, output[-3000:]
    said = "".join(output for _, output in results) + "".join(
        p.read_text(errors="replace") for p in tmp_path.rglob("*.log")
    )
    return [np.load(out / f"weights-{rank}.npy") for rank in (0, 1)], said


@pytest.mark.slow
@pytest.mark.parametrize(("compression", "bucket_mb"), [("none", ""), ("fp16", ""), ("none", "0.00005")])
def test_sharded_on_two_hosts_equals_one_process(
    testhosts: Hosts,
    one_process_reference: Callable[..., Path],
    compression: str,
    bucket_mb: str,
    tmp_path: Path,
) -> None:
    """``bucket_mb`` "": the default (auto: one piece); 0.00005 MB: 2 buckets."""
    reference = np.load(one_process_reference(SCRIPT, "adam") / "weights-0.npy")
    weights, said = sharded_on_two_hosts(testhosts, tmp_path, compression, bucket_mb)
    assert np.array_equal(weights[0], weights[1])  # the all-gather is float32: exact on every rank
    error = float(np.max(np.abs(weights[0] - reference)))
    print(f"max abs difference from one process: {error:.3g} (2 hosts, sharded, wire {compression})")
    assert error <= TOLERANCE[compression], error
    # The backend's default across the hosts (auto: a shard's layout is fixed, one piece), or 2 buckets.
    buckets = f"{float(bucket_mb)} MB" if bucket_mb else "auto"
    assert f"gradients {compression}, buckets {buckets}" in said, said[-3000:]
    wire = "float32" if compression == "none" else compression
    how = "in 2 buckets during" if bucket_mb else "in one piece after"
    assert f"gradients reduce-scattered as {wire} {how} the backward pass" in said, said[-3000:]
    if compression != "none":
        assert error > 0  # the 16-bit wire really was used
