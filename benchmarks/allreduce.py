"""Bare all-reduce time of 1.2M float32 (mnist-cnn's gradient) per backend vs the memory-copy bound.

Two worker processes on this machine, one all-reduce per call timed on the chief (median of --iters
after 5 warm-up calls), each backend started through `tfdist launch`; repeats alternate the backends.
    python benchmarks/allreduce.py --repeats 3 --out benchmarks/results/allreduce.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from tfdist.bench.probes import memcopy_samples

FLOATS = 1_199_882


def allreduce_median(backend: str, workers: int, iters: int, out: Path) -> float:
    env = {
        **os.environ,
        "TF_NUM_INTRAOP_THREADS": "1",
        "TF_NUM_INTEROP_THREADS": "1",
        "TF_CPP_MIN_LOG_LEVEL": "2",
    }
    argv = [sys.executable, "-m", "tfdist", "launch", "-n", str(workers), "--cpu", "--quiet-workers"]
    argv += ["--log-dir", str(out.parent / f"{out.stem}-logs"), "--timeout", "300"]
    if backend == "mpi":
        argv += ["--backend", "mpi"]
    argv += ["-m", "tfdist.bench.probes", "allreduce", "--backend", backend, "--floats", str(FLOATS)]
    argv += ["--iters", str(iters), "--out", str(out)]
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=400)
    if proc.returncode != 0:
        raise RuntimeError(f"{backend} all-reduce failed: {proc.stderr[-2000:]}")
    return float(json.loads(out.read_text())["median_s"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--iters", type=int, default=40)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", default="benchmarks/results/allreduce.json")
    args = parser.parse_args()
    medians: dict[str, list[float]] = {"tf": [], "mpi": [], "memcopy": []}
    with tempfile.TemporaryDirectory() as tmp:
        for repeat in range(args.repeats):
            for backend in ("tf", "mpi") if repeat % 2 == 0 else ("mpi", "tf"):
                path = Path(tmp) / f"{backend}{repeat}.json"
                medians[backend].append(allreduce_median(backend, args.workers, args.iters, path))
            medians["memcopy"].append(statistics.median(memcopy_samples(FLOATS, args.iters)))
    best = {name: statistics.median(values) for name, values in medians.items()}
    report = {
        "benchmark": "allreduce",
        "floats": FLOATS,
        "bytes": FLOATS * 4,
        "workers": args.workers,
        "threads_per_worker": 1,
        "median_s_per_repeat": medians,
        "median_s": best,
        "vs_memcopy": {name: best[name] / best["memcopy"] for name in ("tf", "mpi")},
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2))
    print(json.dumps({k: report[k] for k in ("median_s", "vs_memcopy")}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
