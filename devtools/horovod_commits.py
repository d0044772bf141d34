"""Horovod's API and the MPI synchroniser on several commits of tfdist, side by side in one run.

"No slower": each repeat runs, for every commit in turn (the order rotating from repeat to repeat, as this
machine's speed moves from hour to hour), the two configurations of ``benchmarks/horovod_tape.py`` (a
Horovod ``DistributedGradientTape`` loop and ``tfdist.fit``, both on the MPI backend, 2 ranks) and the
MPI figure of ``tfdist bench`` (2 workers); mnist-cnn, synthetic data, batch 64 per rank, one thread per
rank. An older commit is exported with ``git archive`` and put first on PYTHONPATH; ``HEAD`` means the
working tree. Reports every sample, the medians and each commit's medians over the first one's.
    python devtools/horovod_commits.py --revs cf74d6b,HEAD --repeats 3
        --out benchmarks/results/horovod_commits.json
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
from compare_commits import progress

HVD_WORKER = ROOT / "benchmarks" / "_hvd_worker.py"
THREADS = {"TF_NUM_INTRAOP_THREADS": "1", "TF_NUM_INTEROP_THREADS": "1"}


def run(cmd: list[str], src: Path, timeout: float) -> None:
    env = {**os.environ, **THREADS, "PYTHONPATH": str(src), "TF_CPP_MIN_LOG_LEVEL": "2"}
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")


def hvd_tape(mode: str, src: Path, tmp: Path, steps: int) -> float:
    """examples/s of ``_hvd_worker.py MODE`` (hvd-tape | tfdist-fit) on 2 ranks."""
    out = tmp / f"{mode}.json"
    cmd = [sys.executable, "-m", "tfdist", "launch", "--backend", "mpi", "-n", "2", "--cpu"]
    cmd += ["--quiet-workers", "--run-dir", str(tmp / f"{mode}-logs")]
    cmd += [str(HVD_WORKER), mode, str(steps), str(out)]
    run(cmd, src, 900)
    return float(json.loads(out.read_text())["examples_per_sec"])


def bench_mpi(src: Path, tmp: Path, steps: int) -> float:
    """examples/s of ``tfdist bench``'s mpi run with 2 workers."""
    out = tmp / "bench"
    cmd = [sys.executable, "-m", "tfdist", "bench", "--workload", "mnist-cnn", "--dataset", "synthetic"]
    cmd += ["--workers", "2", "--backend", "mpi", "--compare", "none", "--steps", str(steps)]
    cmd += ["--warmup", "10", "--repeats", "1", "--batch-size-per-replica", "64", "--threads", "1"]
    run([*cmd, "--out", str(out)], src, 900)
    runs = json.loads((out / "results.json").read_text())["runs"]
    return float(next(r["examples_per_sec"] for r in runs if r["backend"] == "mpi"))


MEASURES = ("hvd-tape", "tfdist-fit", "bench-mpi-w2")


def measure(which: list[str], src: Path, tmp: Path, steps: int) -> dict[str, float]:
    """examples/s of each measure in ``which`` (see :data:`MEASURES`) with the tfdist of ``src``."""
    numbers = {}
    for name in which:
        if name == "bench-mpi-w2":
            numbers[name] = bench_mpi(src, tmp, steps)
        else:
            numbers[name] = hvd_tape(name, src, tmp, steps)
    return numbers


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--revs", default="cf74d6b,HEAD", help="commits, comma-separated; HEAD: the tree")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument(
        "--measure", default=",".join(MEASURES), help="comma-separated, of " + ", ".join(MEASURES)
    )
    parser.add_argument("--out", default="benchmarks/results/horovod_commits.json")
    args = parser.parse_args()
    revs, which = args.revs.split(","), args.measure.split(",")
    if set(which) - set(MEASURES):
        raise SystemExit(f"--measure {args.measure}: each must be one of {', '.join(MEASURES)}")
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        trees = {rev: ROOT / "src" if rev == "HEAD" else export(rev, tmp / rev) for rev in revs}

        def one(rev: str, repeat: int) -> dict[str, float]:
            work = tmp / f"{rev}-{repeat}"
            work.mkdir()
            return measure(which, trees[rev], work, args.steps)

        runs = alternate(revs, args.repeats, one, show=progress)
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    samples = {rev: by_key(rows) for rev, rows in runs.items()}
    median = {rev: medians(figures) for rev, figures in samples.items()}
    first = revs[0]
    report: dict[str, Any] = {
        "benchmark": "horovod_commits",
        "workload": "mnist-cnn, synthetic 28x28x1, batch 64 per rank, 1 thread per rank, 2 ranks",
        "revs": revs,
        "head_commit": head.stdout.strip(),
        "steps": args.steps,
        "examples_per_sec": samples,
        "median_examples_per_sec": median,
        f"vs_{first}": {rev: {k: median[rev][k] / median[first][k] for k in median[rev]} for rev in revs},
    }
    write_json(args.out, report)
    print(json.dumps({k: report[k] for k in ("median_examples_per_sec", f"vs_{first}")}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
