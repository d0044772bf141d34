"""The MPI backend's gradient buckets (overlap) and 16-bit wire across two test hosts, side by side.

Two test hosts (network namespaces on this machine, prefix ``tfdb``, subnet 10.90.0), one worker each
(mnist-cnn, batch 64 per worker, 1 thread), for each link setting (``--links 1gbit,uncapped``): one
``tfdist bench --nodes 2`` whose grid is the mpi backend with every compression (``--compression``) and
bucket size (``--bucket-mb``), beside ``independent`` and ``raw-tf``, repeats alternated by the bench.
Then ``big-gradient`` (16 MB of gradient, almost no compute) at 1 Gbit/s, and the buckets with MPICH's own
progress thread (``MPIR_CVAR_ASYNC_PROGRESS=1``) against the coordinator's polling. Each bench keeps its
results.json/report.md; ``summary.json`` holds every configuration's ratio to ``independent`` of its run.
The code measured is a snapshot of the commit (``git archive``), so edits during the run do not enter it.
Needs root (test hosts).

    python benchmarks/overlap_nodes.py --out benchmarks/results/overlap-nodes
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))  # the shared _common.py
from _common import ROOT, export, ratio_each, write_json

HOSTS = str(ROOT / "scripts" / "testhosts.sh")
PREFIX = {"TFDIST_HOSTS_PREFIX": "tfdb", "TFDIST_HOSTS_SUBNET": "10.90.0"}
ON_HOST = f"{HOSTS} exec {{host}} --"


def hosts(*args: str) -> None:
    """``scripts/testhosts.sh ARGS`` on this benchmark's hosts."""
    env = {**os.environ, **PREFIX}
    subprocess.run([HOSTS, *args], env=env, check=True, capture_output=True, timeout=120)


def cap(rate: str) -> None:
    for name in ("node1", "node2"):
        hosts("cap", name, "off" if rate == "uncapped" else rate)


def bench(out: Path, src: Path, steps: int, *extra: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    """One ``tfdist bench`` across the two hosts; returns its results.json (per-run folders removed)."""
    cmd = [sys.executable, "-m", "tfdist", "bench", "--hosts", "node1,node2", "--nodes", "2"]
    cmd += ["--on-host", ON_HOST, "--steps", str(steps), "--warmup", "10", "--threads", "1"]
    cmd += ["--batch-size-per-replica", "64", "--out", str(out), *extra]
    full_env = {**os.environ, **PREFIX, "PYTHONPATH": str(src), **(env or {})}
    proc = subprocess.run(cmd, cwd=ROOT, env=full_env, capture_output=True, text=True, timeout=5400)
    (out.parent / f"{out.name}.log").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        raise SystemExit(f"tfdist bench failed ({out}):\n{(proc.stdout + proc.stderr)[-3000:]}")
    for folder in ("runs", "logs"):  # per-run logs: kept only when a run fails
        shutil.rmtree(out / folder, ignore_errors=True)
    results: dict[str, Any] = json.loads((out / "results.json").read_text())
    return results


def per_repeat(row: dict[str, Any], reference: dict[str, Any] | None) -> dict[str, Any]:
    """Ratios of one configuration to a reference taken repeat by repeat (the bench runs every
    configuration once per repeat, in a rotated order: a repeat's runs are minutes apart, the repeats
    tens of minutes), and their median: steadier than the ratio of medians on a machine whose load moves."""
    if reference is None:
        return {"each": None, "median": None}
    each = ratio_each(row["examples_per_sec_all"], reference["examples_per_sec_all"])
    return {"each": each, "median": statistics.median(each)}


def ratios(results: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each configuration's examples/s (median of the repeats), ratio to independent and to raw-tf (of the
    medians, as the bench reports them, and repeat by repeat)."""
    size = "-n2-w2-r1"
    rows = {r["name"]: r for r in results["runs"]}
    independent, raw_tf = rows.get("independent" + size), rows.get("raw-tf" + size)
    return {
        name: {
            "examples_per_sec": r["examples_per_sec"],
            "examples_per_sec_all": r["examples_per_sec_all"],
            "step_time_median_s": r["step_time_median_s"],
            "load_1min": r["load_1min"],
            "vs_independent": r["vs_independent"],
            "vs_raw_tf": r["vs_raw_tf"],
            "vs_independent_per_repeat": per_repeat(r, independent),
            "vs_raw_tf_per_repeat": per_repeat(r, raw_tf),
        }
        for name, r in rows.items()
    }


def context() -> dict[str, Any]:
    commit = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=30
    )
    return {"commit": commit.stdout.strip(), "load_1min": os.getloadavg()[0], "time": time.strftime("%FT%T")}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", default="benchmarks/results/overlap-nodes")
    parser.add_argument("--links", default="1gbit,uncapped")
    parser.add_argument("--compression", default="none,fp16,bf16")
    parser.add_argument("--bucket-mb", default="0,2")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--skip", default="", help="comma-separated parts to skip: grid, big-gradient, progress"
    )
    parser.add_argument("--summary", default="summary.json", help="the summary's file name under --out")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    skip = set(filter(None, args.skip.split(",")))
    started = context()
    summary: dict[str, Any] = {"benchmark": "overlap-nodes", "started": started, "links": {}}
    variants = ["--backend", "mpi", "--compression", args.compression, "--bucket-mb", args.bucket_mb]
    repeats = ["--repeats", str(args.repeats)]
    with tempfile.TemporaryDirectory(prefix="tfdist-overlap-") as tmp:
        src = export(started["commit"], Path(tmp))
        hosts("up", "2")
        try:
            for rate in [] if "grid" in skip else args.links.split(","):
                cap(rate)
                print(f"{rate}: mnist-cnn", flush=True)
                results = bench(
                    out / rate, src, args.steps, *variants, "--compare", "independent,raw-tf", *repeats
                )
                summary["links"][rate] = {"mnist-cnn": ratios(results), "link": results.get("link")}
                write_json(out / args.summary, summary)
            if "big-gradient" not in skip:
                cap("1gbit")
                print("1gbit: big-gradient", flush=True)
                results = bench(out / "1gbit-big-gradient", src, 20, "--workload", "big-gradient", *variants,
                                "--compare", "independent", *repeats)  # fmt: skip
                summary["big_gradient_1gbit"] = ratios(results)
                write_json(out / args.summary, summary)
            if "progress" not in skip:
                cap("1gbit")
                print("1gbit: MPICH's async progress thread", flush=True)
                results = bench(out / "1gbit-async-progress", src, args.steps, "--backend", "mpi",
                                "--bucket-mb", args.bucket_mb, "--compare", "independent", *repeats,
                                env={"MPIR_CVAR_ASYNC_PROGRESS": "1"})  # fmt: skip
                summary["async_progress_1gbit"] = ratios(results)
        finally:
            hosts("down")
    summary["finished"] = context()
    write_json(out / args.summary, summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
