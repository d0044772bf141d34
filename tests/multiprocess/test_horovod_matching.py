"""Horovod's collectives matched by name across ranks, their gradients, reducescatter and mismatch errors,
on 2 real ranks (tests/helpers/hvd_matching.py computes every expected value on each rank)."""

from __future__ import annotations

import json
from pathlib import Path

from helpers.cli import tfdist

HELPER = Path(__file__).parent.parent / "helpers" / "hvd_matching.py"


def test_names_gradients_reducescatter_and_mismatches_follow_horovod(tmp_path: Path) -> None:
    args = ["--backend", "mpi", "-n", "2", "--cpu", "--run-dir", str(tmp_path / "run")]
    args += [str(HELPER), str(tmp_path)]
    proc = tfdist("launch", *args, env={"TF_CPP_MIN_LOG_LEVEL": "2"}, timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for rank in (0, 1):
        checks = json.loads((tmp_path / f"checks-{rank}.json").read_text())
        seconds = {k: checks.pop(k) for k in list(checks) if k.endswith("seconds")}
        assert len(checks) >= 25 and len(seconds) == 2
        bad = {name: v for name, v in checks.items() if not (isinstance(v, float) and v <= 1e-5)}
        assert not bad, f"rank {rank}: {bad}"
        assert all(s < 10 for s in seconds.values()), seconds  # promptly, on both ranks
