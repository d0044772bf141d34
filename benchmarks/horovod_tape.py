"""Horovod's API on tfdist vs tfdist.fit, both on the MPI backend with 2 ranks started by `tfdist launch`,
side by side: a DistributedGradientTape custom loop (Horovod's TensorFlow 2 example) against tfdist.fit.

Same model (mnist-cnn, synthetic data), batch 64 per rank, the two configurations alternated in every
repeat; each reports examples/s of its second epoch (tracing excluded). Ratios are taken from the medians.
    python benchmarks/horovod_tape.py --repeats 3 --steps 60 --out benchmarks/results/horovod_tape.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # the shared _common.py
from _common import alternate, launched_run, medians, write_json

MODES = ("hvd-tape", "tfdist-fit")
WORKER = str(Path(__file__).parent / "_hvd_worker.py")
RANK_ENV = {"TF_CPP_MIN_LOG_LEVEL": "2", "TF_NUM_INTRAOP_THREADS": "1", "TF_NUM_INTEROP_THREADS": "1"}


def run_once(mode: str, steps: int, ranks: int) -> float:
    """examples/s of one launched run's timed epoch."""
    result = launched_run(WORKER, "mpi", ranks, mode, str(steps), timeout=900, env=RANK_ENV)
    return float(result["examples_per_sec"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--out", default="benchmarks/results/horovod_tape.json")
    args = parser.parse_args()
    samples = alternate(
        MODES,
        args.repeats,
        lambda mode, _: run_once(mode, args.steps, args.ranks),
        show=lambda repeat, mode, value: f"repeat {repeat + 1}: {mode:10s} {value:8.1f} ex/s",
    )
    median = medians(samples)
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
    write_json(args.out, result)
    print(json.dumps({k: result[k] for k in ("median_examples_per_sec", "hvd_tape_vs_tfdist_fit")}, indent=2))


if __name__ == "__main__":
    main()
