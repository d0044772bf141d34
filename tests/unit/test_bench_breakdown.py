"""Where a step's time goes (tfdist.bench.breakdown): traces in the timeline's format split into parts, the
wire time of an all-reduce at a link's rate, and the two bounds."""

from __future__ import annotations

from typing import Any

import pytest

from tfdist.bench.breakdown import WAIT, bounds, breakdown, step_parts, waiting, wire_ms


def span(name: str, start_ms: float, dur_ms: float, tid: int = 0, **args: Any) -> dict[str, Any]:
    event = {"name": name, "ph": "X", "ts": start_ms * 1e3, "dur": dur_ms * 1e3, "pid": 0, "tid": tid}
    if args:
        event["args"] = args
    return event


def trace(steps: int, compute: float, reduce_: float, update: float, crossed: int, nodes: int) -> dict:
    events, at = [], 0.0
    for _ in range(steps):
        total = compute + reduce_ + update
        events.append(span("step", at, total, **{"bytes across nodes": crossed}))
        events.append(span("forward + backward", at, compute, tid=1))
        events.append(span("all-reduce", at + compute, reduce_, tid=1))
        events.append(span("update", at + compute + reduce_, update, tid=1))
        events.append({"name": "sent b0", "ph": "i", "ts": (at + 10) * 1e3, "pid": 0, "tid": 1})
        at += total + 5
    return {"traceEvents": events, "otherData": {"nodes": nodes}}


def test_steps_split_into_their_parts_after_the_warmup() -> None:
    rows = step_parts(trace(5, 60, 30, 2, 4_800_000, 2)["traceEvents"], skip=2)
    assert len(rows) == 3
    assert rows[0] == {
        "step": 92.0,
        "bytes": 4_800_000,
        "forward + backward": 60.0,
        "all-reduce": 30.0,
        "update": 2.0,
        "sent b0": 10.0,
    }


def test_breakdown_takes_every_ranks_steps_together() -> None:
    parts = breakdown([trace(4, 60, 30, 2, 4_800_000, 2), trace(4, 64, 26, 2, 4_800_000, 2)], skip=1)
    assert parts["step"] == 92.0 and parts["forward + backward"] == 62.0 and parts["all-reduce"] == 28.0
    assert parts["mb_across_nodes"] == 4.8 and parts["nodes"] == 2


def test_the_wait_for_the_slowest_rank_is_read_per_step() -> None:
    """Rank 1 ends its backward pass 4 ms after rank 0 in every step (their steps start together): each
    step one rank waits 4 ms, the other 0, 2 ms on average; a lone rank waits for nobody."""
    fast, slow = trace(4, 60, 30, 2, 0, 1), trace(4, 64, 26, 2, 0, 1)
    assert waiting([fast, slow], skip=1) == pytest.approx(2.0)
    assert breakdown([fast, slow], skip=1)[WAIT] == pytest.approx(2.0)
    assert waiting([fast], skip=0) is None and WAIT not in breakdown([fast], skip=0)
    three = [trace(3, 60, 30, 2, 0, 1), trace(3, 66, 24, 2, 0, 1), trace(3, 60, 30, 2, 0, 1)]
    assert waiting(three, skip=0) == pytest.approx(4.0)  # (6 + 0 + 6) / 3
    # A step whose parts one rank did not record is left out, not counted as no wait.
    partial = trace(4, 64, 26, 2, 0, 1)
    partial["traceEvents"] = [
        e for e in partial["traceEvents"] if not (e["name"] == "forward + backward" and e["ts"] > 0)
    ]
    assert waiting([fast, partial], skip=0) == pytest.approx(2.0)


def test_a_step_that_crossed_nothing_has_no_bytes() -> None:
    parts = breakdown([trace(3, 50, 0, 1, 0, 1)], skip=0)
    assert "mb_across_nodes" not in parts and "nodes" not in parts
    assert bounds(parts, 1.0) == {}
    assert breakdown([], skip=0) == {} and breakdown([trace(2, 50, 1, 1, 0, 1)], skip=5) == {}


def test_wire_time_is_what_any_allreduce_must_move() -> None:
    assert wire_ms(4.8e6, 2, 1.0) == pytest.approx(38.4)  # half out, half back: the whole buffer each way
    assert wire_ms(4.8e6, 4, 1.0) == pytest.approx(57.6)  # 2 (n - 1) / n = 1.5 of it
    assert wire_ms(4.8e6, 2, 10.0) == pytest.approx(3.84)
    assert wire_ms(4.8e6, 1, 1.0) == 0.0 and wire_ms(4.8e6, 2, 0.0) == 0.0


def test_bounds_with_the_step_own_compute_or_an_undisturbed_one() -> None:
    parts = {"step": 120.0, "forward + backward": 70.0, "update": 2.0, "mb_across_nodes": 4.8, "nodes": 2}
    own = bounds(parts, 1.0)
    assert own["wire"] == pytest.approx(38.4)
    assert own["serial_bound"] == pytest.approx(110.4) and own["overlap_bound"] == pytest.approx(72.0)
    assert own["vs_serial_bound"] == pytest.approx(110.4 / 120, abs=1e-3)
    alone = bounds(parts, 1.0, compute_ms=55.0)  # the copies' compute: the stretched backward pass shows
    assert alone["compute"] == 55.0 and alone["serial_bound"] == pytest.approx(95.4)
    assert alone["overlap_bound"] == pytest.approx(57.0)
    slow_link = bounds(parts, 0.1, compute_ms=55.0)  # 384 ms of wire: the overlap bound is the wire's
    assert slow_link["overlap_bound"] == pytest.approx(386.0)
