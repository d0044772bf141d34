"""Where a step's time goes, from ``tfdist.fit(timeline=...)`` traces: pure arithmetic, no TensorFlow.

Per measured step of each rank: the step, its forward + backward pass, the all-reduce left after it, the
update, the bucket instants and the bytes summed across nodes. An all-reduce over ``n`` nodes moves at
least ``2 (n - 1) / n`` of its bytes in and out of each node: its *wire time* at the link's rate. A step
that sums after its backward pass cannot beat ``compute + wire + update``; one that overlaps,
``max(compute, wire) + update``.
"""

from __future__ import annotations

import bisect
import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

SPANS = (
    "forward + backward",
    "all-reduce",
    "update",
    "all-reduce + update",
    "reduce-scatter",  # a sharded optimizer's (tfdist.sync.shard), then its update and all-gather
    "update + all-gather",
)
BYTES = "bytes across nodes"
#: How long a rank's gradients waited for the last rank's, per step (see :func:`waiting`).
WAIT = "waiting for the slowest rank"


def step_parts(events: Sequence[Mapping[str, Any]], skip: int) -> list[dict[str, float]]:
    """One dict per step after the first ``skip``: span lengths and instants (ms from the step's start),
    and the step's bytes across nodes when the trace counted them."""
    steps = [e for e in events if e.get("name") == "step" and e.get("ph") == "X"]
    inner = sorted((e for e in events if e.get("tid") == 1), key=lambda e: e["ts"])
    rows = []
    at = 0
    for step in steps[skip:]:
        start, end = step["ts"], step["ts"] + step["dur"]
        row = {"step": step["dur"] / 1e3}
        if BYTES in step.get("args", {}):
            row["bytes"] = float(step["args"][BYTES])
        while at < len(inner) and inner[at]["ts"] < start:  # inner events are ordered: one pass in all
            at += 1
        for e in inner[at:]:
            if e["ts"] > end:
                break
            if e.get("ph") == "X" and e["name"] in SPANS:
                row[e["name"]] = e["dur"] / 1e3
            elif e.get("ph") == "i":
                row[e["name"]] = (e["ts"] - start) / 1e3
        rows.append(row)
    return rows


def medians(rows: Iterable[Mapping[str, float]]) -> dict[str, float]:
    """The median of each key over the rows that have it."""
    rows = list(rows)
    keys = dict.fromkeys(k for row in rows for k in row)
    return {k: statistics.median(r[k] for r in rows if k in r) for k in keys}


def wire_ms(nbytes: float, nodes: int, gbit_s: float) -> float:
    """The least time (ms) an all-reduce of ``nbytes`` over ``nodes`` nodes needs on links of ``gbit_s``."""
    if nodes < 2 or gbit_s <= 0:
        return 0.0
    return nbytes * 2 * (nodes - 1) / nodes * 8 / (gbit_s * 1e9) * 1e3


def ready_times(events: Sequence[Mapping[str, Any]], skip: int) -> list[float | None]:
    """Per step after the first ``skip``: when its backward pass ended (us), None without one."""
    steps = [e for e in events if e.get("name") == "step" and e.get("ph") == "X"][skip:]
    ends = sorted(
        e["ts"] + e["dur"] for e in events if e.get("name") == "forward + backward" and e.get("ph") == "X"
    )
    out: list[float | None] = []
    for step in steps:
        first = bisect.bisect_left(ends, step["ts"])  # the first end at or after the step's start
        inside = first < len(ends) and ends[first] <= step["ts"] + step["dur"]
        out.append(ends[first] if inside else None)
    return out


def waiting(traces: Sequence[Mapping[str, Any]], skip: int) -> float | None:
    """The median over the measured steps of how long the ranks' gradients waited, on average, for the
    last rank's (ms; the ranks' clocks as they are); None with one rank."""
    per_rank = [ready_times(t["traceEvents"], skip) for t in traces]
    if len(per_rank) < 2:
        return None
    waits = []
    for readies in zip(*per_rank, strict=False):  # step k of every rank
        if any(r is None for r in readies):
            continue
        latest = max(r for r in readies if r is not None)
        waits.append(sum(latest - r for r in readies if r is not None) / len(readies) / 1e3)
    return statistics.median(waits) if waits else None


def breakdown(traces: Sequence[Mapping[str, Any]], skip: int) -> dict[str, float]:
    """The medians of every rank's measured steps of one run, in ms (span names, bucket instants,
    :data:`WAIT` with several ranks), and ``mb_across_nodes`` with ``nodes`` when the steps crossed nodes."""
    rows = [row for t in traces for row in step_parts(t["traceEvents"], skip)]
    if not rows:
        return {}
    out = medians(rows)
    wait = waiting(traces, skip)
    if wait is not None:
        out[WAIT] = wait
    nbytes = out.pop("bytes", 0.0)
    if nbytes:
        out["mb_across_nodes"] = nbytes / 1e6
        out["nodes"] = max(int(t.get("otherData", {}).get("nodes", 1)) for t in traces)
    return {k: round(v, 3) for k, v in out.items()}


def bounds(parts: Mapping[str, float], gbit_s: float, compute_ms: float | None = None) -> dict[str, float]:
    """The wire time of a :func:`breakdown` at ``gbit_s``, the two bounds and each over the step (1.0: the
    wire's pace); ``{}`` without bytes across nodes. ``compute_ms``: an unsynchronised copy's forward +
    backward pass, else the step's own."""
    compute = compute_ms if compute_ms is not None else parts.get("forward + backward")
    mb = parts.get("mb_across_nodes", 0.0)
    if not mb or compute is None or gbit_s <= 0:
        return {}
    wire = wire_ms(mb * 1e6, int(parts.get("nodes", 2)), gbit_s)
    update = parts.get("update", 0.0)
    serial, overlap = compute + wire + update, max(compute, wire) + update
    out = {
        "compute": compute,
        "wire": wire,
        "serial_bound": serial,
        "overlap_bound": overlap,
        "vs_serial_bound": serial / parts["step"],
        "vs_overlap_bound": overlap / parts["step"],
    }
    return {k: round(v, 3) for k, v in out.items()}
