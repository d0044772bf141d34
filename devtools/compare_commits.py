"""Two commits of tfdist side by side in one run: fit overhead and weak scaling, alternated per repeat.

A refactor must not cost speed; this machine's speed moves from hour to hour, so the old and the new code
are measured in turns within one run (the old commit is exported to a temporary directory and put first on
PYTHONPATH). Each repeat runs, for each commit: ``benchmarks/fit_overhead.py --repeats 1`` (tfdist.fit,
a hand-written loop and Keras fit, one device) and ``tfdist bench --workers 1,2 --backend tf,mpi
--repeats 1`` (mnist-cnn, batch 64 per worker, one thread per worker).
    python devtools/compare_commits.py --base 56da971 --repeats 3
        --out benchmarks/results/compare_commits.json
    python devtools/compare_commits.py --base 29eb2b0 --no-fit --backend mpi  # the bench grid only
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))  # the benchmarks' _common.py
from _common import ROOT, alternate, by_key, export, medians, write_json


def run(cmd: list[str], src: Path, timeout: float) -> None:
    env = {**os.environ, "PYTHONPATH": str(src), "TF_CPP_MIN_LOG_LEVEL": "2"}
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise SystemExit(
            f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-2000:]}{proc.stderr[-3000:]}"
        )


def fit_overhead(src: Path, tmp: Path, steps: int) -> dict[str, float]:
    out = tmp / "fit_overhead.json"
    script = ROOT / "benchmarks" / "fit_overhead.py"
    run([sys.executable, str(script), "--repeats", "1", "--steps", str(steps), "--out", str(out)], src, 900)
    figures: dict[str, float] = json.loads(out.read_text())["median_examples_per_sec"]
    return figures


def scaling(src: Path, tmp: Path, steps: int, backends: str = "tf,mpi") -> dict[str, float]:
    out = tmp / "bench"
    cmd = [sys.executable, "-m", "tfdist", "bench", "--workload", "mnist-cnn", "--dataset", "synthetic"]
    cmd += ["--workers", "1,2", "--backend", backends, "--steps", str(steps), "--warmup", "10"]
    cmd += ["--repeats", "1", "--batch-size-per-replica", "64", "--threads", "1", "--out", str(out)]
    run(cmd, src, 1800)
    payload = json.loads((out / "results.json").read_text())
    return {f"{r['backend']}-w{r['workers']}": float(r["examples_per_sec"]) for r in payload["runs"]}


def progress(repeat: int, which: str, numbers: dict[str, float]) -> str:
    """The line shown after each commit's turn."""
    return f"repeat {repeat + 1} {which}: " + ", ".join(f"{k} {v:,.0f}" for k, v in numbers.items())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--base", required=True, help="the commit to compare with (e.g. the last release)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--out", default="benchmarks/results/compare_commits.json")
    parser.add_argument("--backend", default="tf,mpi", help="the bench grid's backends")
    parser.add_argument("--no-fit", action="store_true", help="the bench grid only (no fit_overhead.py)")
    args = parser.parse_args()
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    base = subprocess.run(
        ["git", "rev-parse", "--short", args.base], cwd=ROOT, capture_output=True, text=True
    )
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        # HEAD as committed (not the working tree): edits made while it runs do not enter the figures.
        trees = {"base": export(args.base, tmp / "base"), "head": export("HEAD", tmp / "head")}

        def measure(which: str, repeat: int) -> dict[str, float]:
            work = tmp / f"{which}-{repeat}"
            work.mkdir()
            return {
                **({} if args.no_fit else fit_overhead(trees[which], work, args.steps)),
                **scaling(trees[which], work, args.steps, args.backend),
            }

        runs = alternate(("base", "head"), args.repeats, measure, show=progress)
    samples = {which: by_key(rows) for which, rows in runs.items()}
    median = {which: medians(figures) for which, figures in samples.items()}
    report: dict[str, Any] = {
        "benchmark": "compare_commits",
        "base": base.stdout.strip(),
        "head": head.stdout.strip(),
        "examples_per_sec": samples,
        "median_examples_per_sec": median,
        "head_vs_base": {k: median["head"][k] / median["base"][k] for k in median["head"]},
    }
    write_json(args.out, report)
    print(json.dumps({k: report[k] for k in ("base", "head", "head_vs_base")}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
