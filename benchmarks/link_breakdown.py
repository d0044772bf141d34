"""Where a step's time goes, on one host and across two test hosts, each backend beside its references.

One ``tfdist bench --timeline`` per place, mnist-cnn on synthetic data, batch 64 per worker, one thread
per worker, the configurations alternating from repeat to repeat:

- ``one-host``: 2 workers, ``--backend tf,mpi --compare all`` (2 unsynchronised copies: the limit;
  TensorFlow's tutorial loop; ``model.fit``);
- for each link rate of ``--links`` (default ``1gbit,uncapped``): two test hosts (network namespaces of this
  machine, prefix ``tfdl``, subnet 10.95.0), one worker each, ``--backend tf,mpi --bucket-mb 0,2
  --compare independent,raw-tf`` (``--backends``, ``--buckets`` such as ``0,2,auto`` with ``--warmup 20``
  so that auto has decided before the measured steps, and ``--compression fp16`` for the 16-bit wire).

Each bench's results.json holds every configuration's step breakdown (forward + backward, the all-reduce
left after it, update, bytes across nodes) and, across the link, the wire time at the measured rate and
the bounds (:mod:`tfdist.bench.breakdown`); ``summary.json`` puts the figures side by side with the day's
single-step time (one unsynchronised copy's step). Needs root (test hosts).

    python benchmarks/link_breakdown.py --out benchmarks/results/link-breakdown
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))  # the shared _common.py
from _common import ROOT, testhosts, tfdist_bench, write_json

HOSTS = str(ROOT / "scripts" / "testhosts.sh")
HOSTS_ENV = {"TFDIST_HOSTS_PREFIX": "tfdl", "TFDIST_HOSTS_SUBNET": "10.95.0"}
ON_HOST = f"{HOSTS} exec {{host}} --"
KEYS = (
    "step",
    "forward + backward",
    "all-reduce",
    "update",
    "all-reduce + update",
    "mb_across_nodes",
    "waiting for the slowest rank",
)


def hosts(*args: str) -> None:
    """``scripts/testhosts.sh ARGS`` on this benchmark's hosts."""
    testhosts(HOSTS_ENV, *args)


def bench(out: Path, steps: int, repeats: int, *grid: str, warmup: int = 10) -> dict[str, Any]:
    """One ``tfdist bench`` with the timeline: its results.json."""
    common = ("--workload", "mnist-cnn", "--dataset", "synthetic", "--steps", str(steps))
    common += ("--warmup", str(warmup))
    common += ("--repeats", str(repeats), "--threads", "1", "--batch-size-per-replica", "64", "--timeline")
    return tfdist_bench(out, *common, *grid, env=HOSTS_ENV)


def rows(results: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each configuration's rate, step, breakdown and bounds, for the summary."""
    out = {}
    for r in results["runs"]:
        parts = r.get("breakdown", {})
        out[r["name"]] = {
            "examples_per_sec": r["examples_per_sec"],
            "examples_per_sec_all": r["examples_per_sec_all"],
            "vs_independent": r.get("vs_independent"),
            "vs_raw_tf": r.get("vs_raw_tf"),
            **{k: parts[k] for k in KEYS if k in parts},
            **r.get("bounds", {}),
        }
    return out


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--links", default="1gbit,uncapped", help="two-host link rates; '' for one host only")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--no-one-host", action="store_true", help="only the two-host runs")
    parser.add_argument("--backends", default="tf,mpi", help="the two-host runs' backends")
    parser.add_argument("--compression", default="none", help="the MPI backend's wire(s) across the link")
    parser.add_argument("--buckets", default="0,2", help="the MPI backend's bucket sizes across the link")
    parser.add_argument(
        "--warmup", type=int, default=10, help="steps before the measured ones (20: auto buckets decided)"
    )
    parser.add_argument("--out", default="benchmarks/results/link-breakdown")
    args = parser.parse_args()
    out = Path(args.out)
    summary: dict[str, Any] = {
        "benchmark": "link-breakdown",
        "date": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "machine": {"cores": os.cpu_count(), "load_1min_start": os.getloadavg()[0]},
        "places": {},
    }
    if not args.no_one_host:
        grid = ("--workers", "2", "--backend", "tf,mpi", "--compare", "all")
        found = rows(bench(out / "one-host", args.steps, args.repeats, *grid, warmup=args.warmup))
        summary["places"]["one host"] = found
        summary["single_step_ms"] = found.get("independent-w2-r1", {}).get("step")
        print("one host:", json.dumps(found, indent=1), flush=True)
    links = [link for link in args.links.split(",") if link]
    if links:
        hosts("up", "2")
    try:
        for link in links:
            for name in ("node1", "node2"):
                hosts("cap", name, "off" if link == "uncapped" else link)
            grid = (
                "--hosts",
                "node1,node2",
                "--nodes",
                "2",
                "--on-host",
                ON_HOST,
                "--backend",
                args.backends,
            )
            grid += (
                "--bucket-mb",
                args.buckets,
                "--compression",
                args.compression,
                "--compare",
                "independent,raw-tf",
            )
            wire = "" if args.compression == "none" else f", {args.compression} wire"
            found = rows(
                bench(
                    out / f"{link}{wire.replace(', ', '-').replace(' wire', '')}",
                    args.steps,
                    args.repeats,
                    *grid,
                    warmup=args.warmup,
                )
            )
            summary["places"][f"two hosts, {link}{wire}"] = found
            print(link, json.dumps(found, indent=1), flush=True)
    finally:
        if links:
            hosts("down")
    summary["machine"]["load_1min_end"] = os.getloadavg()[0]
    write_json(out / "summary.json", summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
