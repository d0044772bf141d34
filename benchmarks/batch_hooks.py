"""What a per-batch callback costs tfdist.fit: the same 2-worker run with and without a callback that
overrides ``on_train_batch_end`` (which makes tfdist read results after every step), side by side.

Alternates the two modes in every repeat, per backend; reports the median examples/s of each and their
ratio. Same model (mnist-cnn, synthetic data, batch 64 per worker), 2 local workers on the CPU.
    python benchmarks/batch_hooks.py --repeats 3 --steps 40 --out benchmarks/results/batch_hooks.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # the shared _launched.py
from _launched import launched_run

WORKER = str(Path(__file__).with_name("_batch_hooks_worker.py"))
MODES = ("none", "batch-callback")


def one_run(backend: str, mode: str, steps: int, workers: int) -> float:
    """examples/s of one launched run's timed epoch."""
    return float(launched_run(WORKER, backend, workers, mode, str(steps))["examples_per_sec"])


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
        runs: dict[str, list[float]] = {mode: [] for mode in MODES}
        for _ in range(args.repeats):
            for mode in MODES:
                runs[mode].append(one_run(backend, mode, args.steps, args.workers))
        medians = {mode: statistics.median(values) for mode, values in runs.items()}
        report[backend] = {
            "examples_per_sec": runs,
            "median": medians,
            "batch_callback_vs_none": medians["batch-callback"] / medians["none"],
        }
        print(f"{backend}: {medians} ratio {medians['batch-callback'] / medians['none']:.3f}", flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
