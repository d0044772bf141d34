"""Medians of a ``tfdist bench --timeline`` run's traces: per configuration and rank, the step, its
forward + backward pass, the all-reduce left after it, the update, and when each gradient bucket was sent
and summed (ms from the step's start).

    python devtools/timeline_summary.py RUNS_DIR --out FILE.json   # RUNS_DIR: the bench's runs/ folder
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

SPANS = ("forward + backward", "all-reduce", "update")


def step_parts(events: list[dict[str, Any]], skip: int) -> list[dict[str, float]]:
    """One dict per measured step (after ``skip`` warm-up steps): span lengths and instants, in ms."""
    steps = [e for e in events if e.get("name") == "step"]
    rows = []
    for step in steps[skip:]:
        start, end = step["ts"], step["ts"] + step["dur"]
        row = {"step": step["dur"] / 1e3}
        for e in events:
            if e.get("tid") != 1 or not start <= e["ts"] <= end:
                continue
            if e.get("ph") == "X" and e["name"] in SPANS:
                row[e["name"]] = e["dur"] / 1e3
            elif e.get("ph") == "i":
                row[e["name"]] = (e["ts"] - start) / 1e3
        rows.append(row)
    return rows


def medians(rows: list[dict[str, float]]) -> dict[str, float]:
    keys = dict.fromkeys(k for row in rows for k in row)
    return {k: round(statistics.median(r[k] for r in rows if k in r), 2) for k in keys}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("runs", help="the bench's runs/ folder (each run's timeline/timeline-r<rank>.json)")
    parser.add_argument("--skip", type=int, default=10, help="warm-up steps to leave out")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    summary: dict[str, Any] = {}
    for trace in sorted(Path(args.runs).glob("*/timeline/timeline-r*.json")):
        run, rank = trace.parent.parent.name, trace.stem.rsplit("-", 1)[-1]
        rows = step_parts(json.loads(trace.read_text())["traceEvents"], args.skip)
        summary.setdefault(run, {})[rank] = medians(rows)
        print(run, rank, summary[run][rank])
    Path(args.out).write_text(json.dumps({"benchmark": "timeline_summary", "runs": summary}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
