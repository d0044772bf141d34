"""`tfdist bench --timeline` (tfdist.fit's ``timeline``) on 2 real workers: a Chrome trace per rank with every
step split at the gradient exchange, the input waits and the reads of the results."""

from __future__ import annotations

import collections
import json
from pathlib import Path

import pytest

from helpers.cli import tfdist

STEPS, WARMUP = 10, 2


def traces(tmp_path: Path, backend: str) -> list[dict]:
    out = tmp_path / "out"
    grid = ("--workers", "2", "--backend", backend, "--compare", "none", "--repeats", "1")
    length = ("--steps", str(STEPS), "--warmup", str(WARMUP), "--workload", "regression", "--timeline")
    proc = tfdist("bench", "--out", str(out), *grid, *length, timeout=280)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    folder = out / "runs" / f"{backend}-w2-r1-0" / "timeline"
    assert sorted(p.name for p in folder.iterdir()) == ["timeline-r0.json", "timeline-r1.json"]
    return [json.loads((folder / f"timeline-r{rank}.json").read_text()) for rank in (0, 1)]


def check(trace: dict, rank: int, inside: list[str]) -> None:
    events = trace["traceEvents"]
    names = collections.Counter(e["name"] for e in events)
    steps = STEPS + WARMUP
    assert names["step"] == steps and names["input"] == steps and names["read results"] >= 1
    for name in inside:  # every step split at its markers
        assert names[name] == steps, names
    assert all(e["pid"] == rank for e in events)
    spans = [e for e in events if e["ph"] == "X"]
    assert all(e["dur"] >= 0 for e in spans)
    for step in (e for e in spans if e["name"] == "step"):
        parts = [e for e in spans if e["tid"] == 1 and step["ts"] <= e["ts"] <= step["ts"] + step["dur"]]
        assert parts and abs(sum(e["dur"] for e in parts) - step["dur"]) <= 1  # they tile the step (µs)


def test_tf_backend_timeline(tmp_path: Path) -> None:
    for rank, trace in enumerate(traces(tmp_path, "tf")):
        assert trace["otherData"] == {"rank": rank, "synchroniser": "tf"}
        check(trace, rank, ["forward + backward", "all-reduce + update"])


@pytest.mark.slow
def test_mpi_backend_timeline(tmp_path: Path) -> None:
    for rank, trace in enumerate(traces(tmp_path, "mpi")):
        check(trace, rank, ["forward + backward", "all-reduce", "update"])
