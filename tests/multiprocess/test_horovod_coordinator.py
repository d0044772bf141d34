"""The name-matching coordinator under the MPI synchroniser's own sums, on 2 real ranks (no TensorFlow):
opposite orders, a name per step, a shape mismatch, and abandon() (tests/helpers/hvd_coordinator.py)."""

from __future__ import annotations

import json
from pathlib import Path

from helpers.cli import tfdist

HELPER = Path(__file__).parent.parent / "helpers" / "hvd_coordinator.py"


def test_mpi_sums_pair_by_name_and_fail_alike_on_every_rank(tmp_path: Path) -> None:
    args = ["--backend", "mpi", "-n", "2", "--cpu", "--run-dir", str(tmp_path / "run")]
    args += [str(HELPER), str(tmp_path)]
    proc = tfdist("launch", *args, timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for rank in (0, 1):
        checks = json.loads((tmp_path / f"coordinator-{rank}.json").read_text())
        seconds = checks.pop("mismatch seconds")
        assert seconds < 10, seconds  # promptly, on both ranks
        assert len(checks) == (7 if rank == 0 else 6), checks
        bad = {name: v for name, v in checks.items() if v != 0.0}
        assert not bad, f"rank {rank}: {bad}"
