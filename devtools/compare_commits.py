"""Two commits of tfdist side by side in one run: regressions seen, not guessed. This machine's speed moves
from hour to hour, so the two are measured in turns (each exported with ``git archive`` and put first on
PYTHONPATH, so edits made meanwhile do not enter the figures). Each repeat runs, for each commit:
``tfdist bench --workers 2 --backend tf,mpi --compare all`` on one host (mnist-cnn on synthetic data, batch
64 per worker, one thread per worker; not with ``--no-one-host``); for each rate of ``--links`` (``''``:
none), two test hosts (prefix ``tfdc``; needs root) with one worker each, ``--backend mpi --compare
independent,raw-tf`` (``--buckets``: its ``--bucket-mb``), each host on ``--cpus-per-host`` cores of its own
(0: all; the hosts share this machine). ``--same-harness``: HEAD's ``tfdist bench`` measures both commits.
The JSON holds every figure per repeat and commit, the new commit's ratio to the old one repeat by repeat,
and the day's single-step time (one unsynchronised copy's step on one host): how fast the day was.

    python devtools/compare_commits.py                      # the newest tag against HEAD
    python devtools/compare_commits.py --base HEAD~5 --repeats 3 --out benchmarks/results/compare_commits.json
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

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))  # the benchmarks' _common.py
from _common import (
    ROOT,
    TESTHOSTS,
    alternate,
    by_key,
    cap_links,
    export,
    medians,
    ratio_each,
    testhosts,
    tfdist_bench,
    write_json,
)

HOSTS = {"TFDIST_HOSTS_PREFIX": "tfdc", "TFDIST_HOSTS_SUBNET": "10.94.0"}
ON_HOST = f"{TESTHOSTS} exec {{host}} --"
TWO_HOSTS = ("--hosts", "node1,node2", "--nodes", "2", "--on-host", ON_HOST, "--backend", "mpi", "--compare")
TWO_HOSTS += ("independent,raw-tf",)
THREADS = {"TF_NUM_INTRAOP_THREADS": "1", "TF_NUM_INTEROP_THREADS": "1", "TF_CPP_MIN_LOG_LEVEL": "2"}


def bench(src: Path, out: Path, args: argparse.Namespace, prefix: str, *grid: str) -> dict[str, float]:
    """One ``tfdist bench`` of the commit at ``src``: examples/s and step time (ms) of each configuration,
    named ``PREFIX/CONFIG`` and ``PREFIX/CONFIG/step_ms``."""
    options = (
        "--workload",
        "mnist-cnn",
        "--dataset",
        "synthetic",
        "--steps",
        str(args.steps),
        "--repeats",
        "1",
    )
    options += ("--warmup", str(args.warmup), "--threads", "1", "--batch-size-per-replica", "64")
    env = {**HOSTS, **THREADS, "PYTHONPATH": str(src)}
    figures: dict[str, float] = {}
    for r in tfdist_bench(out, *options, *grid, env=env)["runs"]:
        figures[f"{prefix}/{r['backend']}"] = float(r["examples_per_sec"])
        figures[f"{prefix}/{r['backend']}/step_ms"] = float(r["step_time_median_s"]) * 1e3
    return figures


def short(rev: str) -> str:
    """``rev``'s short hash; SystemExit with one line when it names no commit."""
    found = subprocess.run(["git", "rev-parse", "--short", rev], cwd=ROOT, capture_output=True, text=True)
    if found.returncode != 0:
        raise SystemExit(f"--base {rev}: not a commit of this repository. Hint: git log --oneline.")
    return found.stdout.strip()


def newest_tag() -> str:
    """The newest tag reachable from HEAD; SystemExit with one line when there is none."""
    git = ["git", "describe", "--tags", "--abbrev=0"]
    found = subprocess.run(git, cwd=ROOT, capture_output=True, text=True, timeout=30)
    if found.returncode != 0:
        raise SystemExit(
            "no tag reachable from HEAD to compare with. Hint: pass --base COMMIT (e.g. HEAD~5)."
        )
    return found.stdout.strip()


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--base", help="the commit to compare with (default: the newest tag)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--warmup", type=int, default=10, help="steps before the measured ones")
    parser.add_argument("--links", default="1gbit,uncapped", help="two-host link rates; '' for one host only")
    parser.add_argument("--no-one-host", action="store_true", help="only the two-host runs")
    parser.add_argument("--cpus-per-host", type=int, default=1, help="the two hosts' cores each (0: all)")
    parser.add_argument("--buckets", help="the two-host runs' --bucket-mb")
    parser.add_argument("--same-harness", action="store_true", help="HEAD's tfdist bench for both")
    parser.add_argument("--out", default="benchmarks/results/compare_commits.json")
    args = parser.parse_args()
    base_rev = args.base or newest_tag()
    base, head = short(base_rev), short("HEAD")
    links = [link for link in args.links.split(",") if link]
    started = time.strftime("%Y-%m-%dT%H:%M:%S")
    if links:
        testhosts(HOSTS, "up", "2")
    try:
        with tempfile.TemporaryDirectory() as tmp_name:
            tmp = Path(tmp_name)
            trees = {"base": export(base_rev, tmp / "base"), "head": export("HEAD", tmp / "head")}
            if args.same_harness:
                shutil.copytree(
                    trees["head"] / "tfdist" / "bench", trees["base"] / "tfdist" / "bench", dirs_exist_ok=True
                )
                shutil.copy2(trees["head"] / "tfdist" / "cli" / "bench.py", trees["base"] / "tfdist" / "cli")

            def measure(which: str, repeat: int) -> dict[str, float]:
                src, work = trees[which], tmp / f"{which}-{repeat}"
                work.mkdir()
                figures: dict[str, float] = {}
                grid = ("--workers", "2", "--backend", "tf,mpi", "--compare", "all")
                if not args.no_one_host:
                    figures.update(bench(src, work / "one-host", args, "one host", *grid))
                for link in links:
                    cap_links(HOSTS, 2, link)
                    grid = (*TWO_HOSTS, *(("--bucket-mb", args.buckets) * bool(args.buckets)))
                    grid += ("--cpus-per-host", str(args.cpus_per_host)) * bool(args.cpus_per_host)
                    figures.update(bench(src, work / f"two-hosts-{link}", args, f"2 hosts {link}", *grid))
                return figures

            def progress(repeat: int, which: str, numbers: dict[str, float]) -> str:
                shown = ", ".join(f"{k} {v:,.0f}" for k, v in numbers.items() if not k.endswith("step_ms"))
                return f"repeat {repeat + 1} {which}: {shown}"

            runs = alternate(("base", "head"), args.repeats, measure, show=progress)
    finally:
        if links:
            testhosts(HOSTS, "down")
    samples = {which: by_key(rows) for which, rows in runs.items()}
    median = {which: medians(figures) for which, figures in samples.items()}
    rates = [k for k in samples["head"] if not k.endswith("step_ms")]
    report: dict[str, Any] = {
        "benchmark": "compare_commits",
        "date": started,
        "machine": {
            "cores": os.cpu_count(),
            "python": sys.version.split()[0],
            "load_1min_end": os.getloadavg()[0],
        },
        # How fast the day was: one unsynchronised copy's step (one host, the new commit's runs).
        "single_step_ms": next(
            (v for k, v in median["head"].items() if k.endswith("independent/step_ms")), None
        ),
        "cpus_per_host": args.cpus_per_host,  # 0: the two hosts share all of this machine's cores
        "base": base,
        "head": head,
        "repeats": args.repeats,
        "examples_per_sec": samples,
        "median_examples_per_sec": median,
        # Repeat by repeat (the two commits ran close in time), then the median of those ratios.
        "head_vs_base": {
            k: statistics.median(ratio_each(samples["head"][k], samples["base"][k])) for k in rates
        },
    }
    write_json(args.out, report)
    print(json.dumps({k: report[k] for k in ("base", "head", "single_step_ms", "head_vs_base")}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
