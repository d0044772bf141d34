"""What each worker's own data costs tfdist.fit: the same 2-worker mnist-cnn run on the job's data, on each
worker's own arrays (one more all-reduce of one number per step) and on each worker's own dataset of
unknown length (its first epoch adds one agreement per step), side by side.

Alternates the modes in every repeat, per backend; reports the median examples/s of epoch 1 (where the
unknown length costs) and of epoch 3 (the steady state), and their ratios to the job's data.
    python benchmarks/own_data.py --repeats 3 --steps 40 --out benchmarks/results/own_data.json
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # the shared _common.py
from _common import alternate, launched_run, medians, write_json

WORKER = str(Path(__file__).with_name("_own_data_worker.py"))
MODES = ("job", "own", "own-dataset", "own-unknown")


def one_run(backend: str, mode: str, steps: int, workers: int) -> list[float]:
    """examples/s of each epoch of one launched run."""
    return [float(v) for v in launched_run(WORKER, backend, workers, mode, str(steps))["examples_per_sec"]]


def side_by_side(backend: str, repeats: int, steps: int, workers: int) -> dict[str, object]:
    """Every mode on one backend, alternated: each run's examples/s per epoch, the medians of the first
    and the last epoch and their ratios to the job's data."""
    runs = alternate(MODES, repeats, lambda mode, _: one_run(backend, mode, steps, workers))
    first = medians({m: [epochs[0] for epochs in r] for m, r in runs.items()})
    # The last epoch: the steady state (an unknown length's second epoch retraces the step once).
    later = medians({m: [epochs[-1] for epochs in r] for m, r in runs.items()})
    print(f"{backend}: epoch 1 {first}; later {later}", flush=True)
    return {
        "examples_per_sec": runs,
        "median_epoch1": first,
        "median_later_epochs": later,
        "own_vs_job_later": later["own"] / later["job"],
        "own_dataset_vs_job_later": later["own-dataset"] / later["job"],
        "unknown_vs_job_epoch1": first["own-unknown"] / first["job"],
        "unknown_vs_job_later": later["own-unknown"] / later["job"],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--backends", default="tf,mpi")
    parser.add_argument("--out", default="benchmarks/results/own_data.json")
    args = parser.parse_args()
    report: dict[str, object] = {"steps": args.steps, "workers": args.workers, "repeats": args.repeats}
    for backend in args.backends.split(","):
        report[backend] = side_by_side(backend, args.repeats, args.steps, args.workers)
    write_json(args.out, report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
