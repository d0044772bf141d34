"""Horovod's API on tfdist vs tfdist.fit, both on the MPI backend with 2 ranks started by `tfdist launch`,
side by side: a DistributedGradientTape custom loop (Horovod's TensorFlow 2 example) against tfdist.fit.

Same model (mnist-cnn, synthetic data), batch 64 per rank, the two configurations alternated in every
repeat; each reports examples/s of its second epoch (tracing excluded). Ratios are taken from the medians.
    python benchmarks/horovod_tape.py --repeats 3 --steps 60 --out benchmarks/results/horovod_tape.json
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

MODES = ("hvd-tape", "tfdist-fit")
WORKER = str(Path(__file__).parent / "_hvd_worker.py")


def run_once(mode: str, steps: int, ranks: int) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "result.json")
        cmd = [sys.executable, "-m", "tfdist", "launch", "--backend", "mpi", "-n", str(ranks), "--cpu"]
        cmd += ["--quiet-workers", "--log-dir", os.path.join(tmp, "logs"), WORKER, mode, str(steps), out]
        env = {
            **os.environ,
            "TF_CPP_MIN_LOG_LEVEL": "2",
            "TF_NUM_INTRAOP_THREADS": "1",
            "TF_NUM_INTEROP_THREADS": "1",
        }
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env)
        if proc.returncode != 0:
            raise SystemExit(f"{mode} failed:\n{proc.stderr[-3000:]}")
        return float(json.loads(Path(out).read_text())["examples_per_sec"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--out", default="benchmarks/results/horovod_tape.json")
    args = parser.parse_args()
    samples: dict[str, list[float]] = {m: [] for m in MODES}
    for repeat in range(args.repeats):
        for mode in MODES if repeat % 2 == 0 else MODES[::-1]:
            samples[mode].append(run_once(mode, args.steps, args.ranks))
            print(f"repeat {repeat + 1}: {mode:10s} {samples[mode][-1]:8.1f} ex/s", flush=True)
    median = {m: statistics.median(v) for m, v in samples.items()}
    result = {
        "benchmark": "horovod_tape",
        "workload": "mnist-cnn, synthetic 28x28x1, batch 64 per rank, 1 thread per rank",
        "ranks": args.ranks,
        "steps": args.steps,
        "examples_per_sec": samples,
        "median_examples_per_sec": median,
        "hvd_tape_vs_tfdist_fit": median["hvd-tape"] / median["tfdist-fit"],
        "goal": "within 5 % (0.95-1.05)",
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))
    print(json.dumps({k: result[k] for k in ("median_examples_per_sec", "hvd_tape_vs_tfdist_fit")}, indent=2))


if __name__ == "__main__":
    main()
