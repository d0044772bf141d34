"""The MPI backend's gradient buckets across test hosts: each bucket summed while the backward pass goes on
still trains exactly as one process does (2 hosts; 3 hosts, with and without the 16-bit wire; second tier:
tests/multiprocess/test_buckets_wire.py runs the 2-rank case in the first).

Every host runs `tfdist launch --backend mpi --nnodes N --hosts ... --node-rank R` (one rank per host, so
every sum crosses the hosts' links), on the run's test hosts (``testhosts``).
"""

from __future__ import annotations

import itertools
from pathlib import Path

import hostcluster
import numpy as np
import pytest
from hostcluster import Hosts, clean_env, finish, one_process

PROBE = str(Path(__file__).parent.parent / "helpers" / "overlap_probe.py")
_ports = itertools.count(29900, 20)
#: Bytes per bucket that split the probe's 4 gradients (192, 32, 32 and 4 bytes) into 3 buckets.
BUCKET_MB = "0.00003"


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> np.ndarray:
    """The probe's weights trained in one plain process."""
    out = tmp_path_factory.mktemp("single")
    one_process(PROBE, str(out))
    return np.load(out / "weights-0.npy")


def train_on_hosts(tmp_path: Path, nodes: int, wire: dict[str, str]) -> list[np.ndarray]:
    """overlap_probe.py on node1..node<nodes>, one MPI rank each; every rank's final weights."""
    names = [f"node{i}" for i in range(1, nodes + 1)]
    out = tmp_path / "out"
    out.mkdir()
    common = ["--backend", "mpi", "--nnodes", str(nodes), "--hosts", ",".join(names)]
    common += ["--base-port", str(next(_ports)), "-n", "1", "--cpu"]
    env = clean_env(**wire)
    procs = [
        hostcluster.launch_on(
            name,
            env,
            *common,
            "--node-rank",
            str(rank),
            "--run-dir",
            str(tmp_path / f"run-{name}"),
            PROBE,
            str(out),
        )
        for rank, name in enumerate(names)
    ]
    results = finish(procs, timeout=300)
    for code, output in results:
        assert code == 0, output[-3000:]
    said = "".join(output for _, output in results) + "".join(
        p.read_text(errors="replace") for p in tmp_path.rglob("*.log")
    )
    if float(wire.get("TFDIST_BUCKET_MB", "0")):
        assert "4 gradient(s) in 3 bucket(s)" in said, said[-3000:]
    return [np.load(out / f"weights-{r}.npy") for r in range(nodes)]


@pytest.mark.slow  # ~40-55 s with its one-process reference; the CI tier has the same case on local ranks
def test_buckets_on_two_hosts_equal_one_process(
    testhosts: Hosts, reference: np.ndarray, tmp_path: Path
) -> None:
    weights = train_on_hosts(tmp_path, 2, {"TFDIST_BUCKET_MB": BUCKET_MB})
    assert all(np.array_equal(weights[0], w) for w in weights[1:])
    assert np.max(np.abs(weights[0] - reference)) <= 1e-5


@pytest.mark.slow
@pytest.mark.parametrize(
    ("compression", "tolerance"),
    [("none", 1e-5), ("bf16", 5e-3), ("fp16", 1e-3)],
)
def test_three_hosts_with_buckets_and_compression(
    compression: str, tolerance: float, testhosts: Hosts, reference: np.ndarray, tmp_path: Path
) -> None:
    """Exact without compression; within the 16-bit formats' error with it (and really lossy)."""
    wire = {"TFDIST_BUCKET_MB": BUCKET_MB, "TFDIST_COMPRESSION": compression}
    weights = train_on_hosts(tmp_path, 3, wire)
    assert all(np.array_equal(weights[0], w) for w in weights[1:])  # every rank decodes the same bits
    error = np.max(np.abs(weights[0] - reference))
    assert error <= tolerance
    if compression != "none":
        assert error > 0  # the 16-bit wire really was used
