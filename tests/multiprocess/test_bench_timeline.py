"""`tfdist bench --timeline` (tfdist.fit's ``timeline``) on 2 real workers: a Chrome trace per rank with every
step split at the gradient exchange, the input waits and the reads of the results."""

from __future__ import annotations

import collections
import json
import re
from pathlib import Path

import pytest

from helpers.cli import tfdist

STEPS, WARMUP = 10, 2


def traces(tmp_path: Path, backend: str, env: dict[str, str] | None = None) -> list[dict]:
    out = tmp_path / "out"
    grid = ("--workers", "2", "--backend", backend, "--compare", "none", "--repeats", "1")
    length = ("--steps", str(STEPS), "--warmup", str(WARMUP), "--workload", "regression", "--timeline")
    proc = tfdist("bench", "--out", str(out), *grid, *length, env=env, timeout=280)
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


def breakdown_of(tmp_path: Path) -> dict:
    """The bench's breakdown of its one configuration, and its table in the report."""
    (row,) = json.loads((tmp_path / "out" / "results.json").read_text())["runs"]
    assert "## Where the time goes" in (tmp_path / "out" / "report.md").read_text()
    return row["breakdown"]


@pytest.mark.slow  # the first tier: test_bench_runs.py's runs; the timeline's parsing in tests/unit
def test_tf_backend_timeline(tmp_path: Path) -> None:
    for rank, trace in enumerate(traces(tmp_path, "tf")):
        assert trace["otherData"] == {"rank": rank, "synchroniser": "tf", "nodes": 1}
        check(trace, rank, ["forward + backward", "all-reduce + update"])
    parts = breakdown_of(tmp_path)
    inside = parts["forward + backward"] + parts["all-reduce + update"]
    assert inside == pytest.approx(parts["step"], rel=0.25)  # medians of parts that tile each step
    assert "mb_across_nodes" not in parts  # TensorFlow's collectives: bytes not counted


@pytest.mark.slow
def test_mpi_backend_timeline(tmp_path: Path) -> None:
    """Without the shared-memory level each rank is a node of its own: every step's sum crosses "nodes", and
    the trace counts its bytes: the regression model's gradient and the metric sums, each part padded to
    64 bytes (tfdist.sync.reduce.layout)."""
    # One sum after the backward pass throughout (auto could turn buckets on mid-run, and count other bytes).
    for rank, trace in enumerate(
        traces(tmp_path, "mpi", env={"TFDIST_MPI_SHM": "0", "TFDIST_BUCKET_MB": "0"})
    ):
        check(trace, rank, ["forward + backward", "all-reduce", "update"])
        assert trace["otherData"]["nodes"] == 2
        counted = {e["args"]["bytes across nodes"] for e in trace["traceEvents"] if e["name"] == "step"}
        assert len(counted) == 1 and counted.pop() > 0, counted  # the same sum every step
    parts = breakdown_of(tmp_path)
    assert parts["nodes"] == 2 and parts["mb_across_nodes"] > 0


@pytest.mark.slow
@pytest.mark.parametrize("buckets", ["0", "0.000001"])  # 1 byte: the bias, then the kernel
def test_sharded_steps_in_the_timeline(buckets: str, tmp_path: Path) -> None:
    """With the optimizer sharded, each step is split into forward + backward, its reduce-scatter, and the
    update with its all-gather (with buckets: each bucket's send and sum too). Its bytes: the gradients go
    out in a reduce-scatter and the weights come back in an all-gather, each half an all-reduce of its
    buffer, so a step counts 8 bytes per element of a rank's shard (float32 both ways, 2 ranks)."""
    env = {"TFDIST_MPI_SHM": "0", "TFDIST_SHARD_OPTIMIZER": "1", "TFDIST_BUCKET_MB": buckets}
    traced = traces(tmp_path, "mpi", env=env)
    text = "\n".join(p.read_text() for p in (tmp_path / "out" / "runs").rglob("*.log"))
    found = re.search(r"shard_optimizer: \d+ weights in 2 shards of (\d+).* in (\d+ buckets|one piece)", text)
    assert found, text[-3000:]
    shard, how = int(found.group(1)), found.group(2)
    assert how == ("one piece" if buckets == "0" else "2 buckets"), how
    for rank, trace in enumerate(traced):
        check(trace, rank, ["forward + backward", "reduce-scatter", "update + all-gather"])
        counted = {e["args"]["bytes across nodes"] for e in trace["traceEvents"] if e["name"] == "step"}
        assert counted == {8 * shard}, (counted, shard)
        instants = collections.Counter(e["name"] for e in trace["traceEvents"] if e["ph"] == "i")
        want = (
            {}
            if buckets == "0"
            else {f"{w} b{n}": STEPS + WARMUP for w in ("sent", "summed") for n in (0, 1)}
        )
        assert instants == want, instants
    parts = breakdown_of(tmp_path)
    assert (
        parts["mb_across_nodes"] == pytest.approx(8 * shard / 1e6, abs=1e-3) and parts["reduce-scatter"] > 0
    )
