"""Pure arithmetic of a benchmark: step times from a run's timeline, then speed-up and efficiency."""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tfdist.bench.plan import RunSpec


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


def measured_window(
    timeline: Sequence[Sequence[float]], first_step_at: float | None, warmup: int
) -> list[tuple[int, float]]:
    """The (step, wall time) points from the end of the warm-up on.

    With no warm-up the first point is the end of step 1 (its tracing time is never measured).
    """
    points = [(int(s), float(t)) for s, t in timeline]
    if first_step_at is not None:
        points.insert(0, (1, float(first_step_at)))
    start = max(warmup, 1)
    return [(s, t) for s, t in points if s >= start]


def sample_from_summary(summary: Mapping[str, Any], warmup: int, started_at: float) -> Sample:
    """A Sample from a worker's fit summary (``timeline``, ``first_step_at``, ``global_batch``)."""
    window = measured_window(summary["timeline"], summary.get("first_step_at"), warmup)
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


def summarize(results: Mapping[RunSpec, Sequence[Sample]]) -> list[dict[str, Any]]:
    """One row per configuration: medians over repeats, speed-up and efficiency against the smallest.

    The baseline is the configuration with the fewest replicas in total (the first such in the plan):
    speed-up = its examples/s ratio; efficiency = speed-up / (replicas / baseline replicas).
    """
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
                "backend": spec.backend,
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
                "baseline": spec.name == base.name,
            }
        )
    return rows
