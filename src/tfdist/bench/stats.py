"""Pure arithmetic of a benchmark: step times from a run's timeline, then speed-up and efficiency."""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tfdist.bench.plan import INDEPENDENT, RAW_TF, RunSpec


@dataclass(frozen=True)
class Sample:
    """One repeat of one configuration, as measured."""

    step_times_s: tuple[float, ...]  # per-step time of each timing block after the warm-up
    examples_per_sec: float
    time_to_first_step_s: float
    window: tuple[float, float]  # wall times of the first and last measured points
    cpu_util: float | None = None  # CPU seconds of the job's processes / (wall seconds x cores)
    gpu_util: float | None = None  # mean GPU utilisation (0-1) over the run
    gpu_mem_mb: float | None = None  # peak GPU memory used
    peak_rss_mb: float | None = None  # the largest resident set of any one process of the run
    load_1min: float | None = None  # the machine's 1-minute load average when the run ended (others' work)
    #: Per node, CPU ms per step of each ``role/thread`` of its processes (:mod:`tfdist.bench.threads`).
    thread_ms: dict[str, dict[str, float]] | None = None


def measured_window(
    timeline: Sequence[Sequence[float]], first_step_at: float | None, warmup: int
) -> list[tuple[int, float]]:
    """The (step, wall time) points from the end of the warm-up on (at the earliest the end of step 1)."""
    points = [(int(s), float(t)) for s, t in timeline]
    if first_step_at is not None:
        points.insert(0, (1, float(first_step_at)))
    start = max(warmup, 1)
    return [(s, t) for s, t in points if s >= start]


def sample_from_summary(
    summary: Mapping[str, Any],
    warmup: int,
    started_at: float,
    within: tuple[float, float] | None = None,
) -> Sample:
    """A Sample from a worker's fit summary; ``within``: only the timing points between these wall times
    (when at least two fall inside)."""
    window = measured_window(summary["timeline"], summary.get("first_step_at"), warmup)
    if within is not None:
        inside = [(s, t) for s, t in window if within[0] <= t <= within[1]]
        window = inside if len(inside) >= 2 else window
    if len(window) < 2:
        raise ValueError("fewer than two timing points after the warm-up; run more --steps")
    blocks = [(t1 - t0) / (s1 - s0) for (s0, t0), (s1, t1) in itertools.pairwise(window) if s1 > s0]
    steps, seconds = window[-1][0] - window[0][0], window[-1][1] - window[0][1]
    return Sample(
        step_times_s=tuple(blocks),
        examples_per_sec=steps * int(summary["global_batch"]) / max(seconds, 1e-12),
        time_to_first_step_s=float(summary["first_step_at"]) - started_at,
        window=(window[0][1], window[-1][1]),
    )


def common_window(summaries: Sequence[Mapping[str, Any]], warmup: int) -> tuple[float, float] | None:
    """The wall times during which every copy was past its warm-up and still measuring, or None (a copy
    running alone runs faster than beside the others)."""
    windows = [measured_window(s["timeline"], s.get("first_step_at"), warmup) for s in summaries]
    if any(len(w) < 2 for w in windows):
        return None
    start, end = max(w[0][1] for w in windows), min(w[-1][1] for w in windows)
    return (start, end) if start < end else None


def combine_copies(samples: Sequence[Sample]) -> Sample:
    """One Sample for N unsynchronised copies run at once: their rates add up, their step times pool, the
    window is where all were measuring (their union when they did not overlap)."""
    starts, ends = [x.window[0] for x in samples], [x.window[1] for x in samples]
    window = (max(starts), min(ends)) if max(starts) < min(ends) else (min(starts), max(ends))
    return Sample(
        step_times_s=tuple(t for x in samples for t in x.step_times_s),
        examples_per_sec=sum(x.examples_per_sec for x in samples),
        time_to_first_step_s=max(x.time_to_first_step_s for x in samples),
        window=window,
    )


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (``q`` in 0-100) of a non-empty sequence."""
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def _median_or_none(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def _thread_medians(found: Sequence[dict[str, dict[str, float]] | None]) -> dict[str, dict[str, float]]:
    """Per node and ``role/thread``, the median over the repeats that saw it."""
    nodes: dict[str, dict[str, list[float]]] = {}
    for per_node in filter(None, found):
        for node, spent in per_node.items():
            for key, ms in spent.items():
                nodes.setdefault(node, {}).setdefault(key, []).append(ms)
    return {n: {k: round(statistics.median(v), 2) for k, v in keys.items()} for n, keys in nodes.items()}


def summarize(results: Mapping[RunSpec, Sequence[Sample]]) -> list[dict[str, Any]]:
    """One row per configuration: medians over repeats, speed-up and efficiency against the configuration
    with the fewest replicas, and ratios to the references of the same size and to the one-worker RSS."""
    specs = list(results)
    if not specs:
        return []
    base = min(specs, key=lambda s: s.devices)
    rate = {s: statistics.median(x.examples_per_sec for x in results[s]) for s in specs}
    rows = []
    for spec in specs:
        samples = results[spec]
        steps = [t for x in samples for t in x.step_times_s]
        speedup = rate[spec] / rate[base]
        rows.append(
            {
                "name": spec.name,
                "workers": spec.workers,
                "replicas": spec.replicas,
                "backend": spec.label,
                "variant": spec.variant,
                "nodes": spec.nodes,
                "devices": spec.devices,
                "repeats": len(samples),
                "examples_per_sec": rate[spec],
                "examples_per_sec_all": [x.examples_per_sec for x in samples],
                "step_time_median_s": statistics.median(steps),
                "step_time_p90_s": percentile(steps, 90),
                "speedup": speedup,
                "efficiency": speedup / (spec.devices / base.devices),
                "time_to_first_step_s": statistics.median(x.time_to_first_step_s for x in samples),
                "cpu_util": _median_or_none([x.cpu_util for x in samples]),
                "gpu_util": _median_or_none([x.gpu_util for x in samples]),
                "gpu_mem_mb": _median_or_none([x.gpu_mem_mb for x in samples]),
                "peak_rss_mb": _median_or_none([x.peak_rss_mb for x in samples]),
                "load_1min": _median_or_none([x.load_1min for x in samples]),
                "cpu_ms_per_step": _thread_medians([x.thread_ms for x in samples]),
                "baseline": spec.name == base.name,
            }
        )
    return _compare(rows)


def _ratio(value: float | None, reference: float | None) -> float | None:
    return None if value is None or not reference else value / reference


def _compare(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Add each row's ratios to the reference rows of the same size (None where a reference did not run)."""
    by_name = {r["name"]: r for r in rows}
    base_rss = next((r["peak_rss_mb"] for r in rows if r["baseline"]), None)
    for row in rows:
        size = RunSpec(row["workers"], row["replicas"], "", row.get("nodes", 1)).size
        for key, reference in (("vs_independent", INDEPENDENT), ("vs_raw_tf", RAW_TF)):
            ref = by_name.get(reference + size)
            row[key] = _ratio(row["examples_per_sec"], ref["examples_per_sec"] if ref else None)
        row["rss_vs_one_worker"] = _ratio(row["peak_rss_mb"], base_rss)
    return rows
