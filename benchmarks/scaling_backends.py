"""Weak scaling of mnist-cnn per synchronisation backend, side by side in one run.

One process vs 2 workers over TensorFlow's collectives (MultiWorkerMirroredStrategy) vs 2 MPI ranks
(tfdist's MPI backend), batch 64 per worker, one intra- and one inter-op thread per process, synthetic
28x28x1 data. Configurations alternate within each repeat; throughput is the second epoch's (tracing
excluded). Efficiency = (2-process examples/s / 2) / single-process examples/s.
    python benchmarks/scaling_backends.py --repeats 3 --steps 60 --out benchmarks/results/scaling_backends.json
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

TRAIN = [
    "-m",
    "tfdist",
    "train",
    "--workload",
    "mnist-cnn",
    "--dataset",
    "synthetic",
    "--epochs",
    "2",
    "--batch-size-per-replica",
    "64",
    "--lr",
    "0.01",
]


def run(argv: list[str], out: Path, env: dict[str, str]) -> float:
    proc = subprocess.run(
        [sys.executable, *argv, "--output-dir", str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{argv} failed: {proc.stderr[-2000:]}")
    return float(json.loads((out / "metrics.json").read_text())["history"]["examples_per_sec"][1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--out", default="benchmarks/results/scaling_backends.json")
    args = parser.parse_args()
    steps = ["--steps-per-epoch", str(args.steps)]
    one_thread = {
        **os.environ,
        "TF_NUM_INTRAOP_THREADS": "1",
        "TF_NUM_INTEROP_THREADS": "1",
        "TF_CPP_MIN_LOG_LEVEL": "2",
    }
    configs = {
        "single": (TRAIN + steps, one_thread),
        "tf_2_workers": (TRAIN + steps + ["--workers", "2"], one_thread),
        "mpi_2_ranks": ([], one_thread),  # argv built per repeat: the launcher needs its own log dir
    }
    results: dict[str, list[float]] = {name: [] for name in configs}
    with tempfile.TemporaryDirectory() as tmp:
        for repeat in range(args.repeats):
            for name, (argv, env) in configs.items():
                if (
                    name == "mpi_2_ranks"
                ):  # `tfdist launch ... -m tfdist train ...`: the launcher's own flags first
                    argv = [
                        "-m",
                        "tfdist",
                        "launch",
                        "--backend",
                        "mpi",
                        "-n",
                        "2",
                        "--cpu",
                        "--log-dir",
                        f"{tmp}/{name}{repeat}-logs",
                        *TRAIN,
                        *steps,
                    ]
                results[name].append(run(argv, Path(tmp) / f"{name}{repeat}", env))
    medians = {name: statistics.median(values) for name, values in results.items()}
    report = {
        "benchmark": "scaling_backends",
        "workload": "mnist-cnn, synthetic 28x28x1, batch 64 per worker, 1 intra + 1 inter-op thread per process",
        "examples_per_sec": results,
        "median_examples_per_sec": medians,
        "efficiency": {
            name: medians[name] / 2 / medians["single"] for name in ("tf_2_workers", "mpi_2_ranks")
        },
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2))
    print(json.dumps({k: report[k] for k in ("median_examples_per_sec", "efficiency")}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
