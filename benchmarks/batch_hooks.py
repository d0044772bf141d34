"""What a per-batch callback costs tfdist.fit: the same 2-worker run with and without a callback that
overrides ``on_train_batch_end`` (which makes tfdist read results after every step), side by side.

Alternates the two modes in every repeat, per backend; reports the median examples/s of each and their
ratio. Same model (mnist-cnn, synthetic data, batch 64 per worker), 2 local workers on the CPU.
    python benchmarks/batch_hooks.py --repeats 3 --steps 40 --out benchmarks/results/batch_hooks.json
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # the shared _common.py
from _common import alternate, launched_run, medians, write_json

WORKER = str(Path(__file__).with_name("_batch_hooks_worker.py"))
MODES = ("none", "batch-callback")


def one_run(backend: str, mode: str, steps: int, workers: int) -> float:
    """examples/s of one launched run's timed epoch."""
    return float(launched_run(WORKER, backend, workers, mode, str(steps))["examples_per_sec"])


def side_by_side(backend: str, repeats: int, steps: int, workers: int) -> dict[str, object]:
    """Both modes on one backend, alternated: every run's examples/s, the medians and their ratio."""
    runs = alternate(MODES, repeats, lambda mode, _: one_run(backend, mode, steps, workers))
    median = medians(runs)
    print(f"{backend}: {median} ratio {median['batch-callback'] / median['none']:.3f}", flush=True)
    return {
        "examples_per_sec": runs,
        "median": median,
        "batch_callback_vs_none": median["batch-callback"] / median["none"],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--backends", default="tf,mpi")
    parser.add_argument("--out", default="benchmarks/results/batch_hooks.json")
    args = parser.parse_args()
    report: dict[str, object] = {"steps": args.steps, "workers": args.workers, "repeats": args.repeats}
    for backend in args.backends.split(","):
        report[backend] = side_by_side(backend, args.repeats, args.steps, args.workers)
    write_json(args.out, report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
