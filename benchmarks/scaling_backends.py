"""Weak scaling of mnist-cnn per synchronisation backend, side by side in one run (through `tfdist bench`).

One worker vs 2 workers over TensorFlow's collectives vs 2 MPI ranks, batch 64 per worker, one intra- and
one inter-op thread per process, synthetic 28x28x1 data, configurations rotated across repeats, with the
bottleneck diagnosis. Keeps results.json, report.md and scaling.png under --out.
    python benchmarks/scaling_backends.py --repeats 3 --steps 60 --out benchmarks/results/scaling
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--workload", default="mnist-cnn")
    parser.add_argument("--out", default="benchmarks/results/scaling")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        bench_out = Path(tmp) / "bench"
        argv = [
            sys.executable,
            "-m",
            "tfdist",
            "bench",
            "--workload",
            args.workload,
            "--dataset",
            "synthetic",
        ]
        argv += ["--workers", "1,2", "--backend", "tf,mpi", "--steps", str(args.steps), "--warmup", "10"]
        argv += ["--repeats", str(args.repeats), "--batch-size-per-replica", "64", "--threads", "1"]
        argv += ["--diagnose", "--out", str(bench_out)]
        subprocess.run(argv, check=True, timeout=3600)
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        for name in ("results.json", "report.md", "scaling.png"):
            shutil.copy(bench_out / name, out / name)
    runs = json.loads((out / "results.json").read_text())["runs"]
    print(
        json.dumps(
            {
                r["name"]: {"examples_per_sec": r["examples_per_sec"], "efficiency": r["efficiency"]}
                for r in runs
            },
            indent=2,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
