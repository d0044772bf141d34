"""What a per-batch callback costs tfdist.fit: the same run with and without a callback that overrides
``on_train_batch_end`` (which makes tfdist read results after every step), side by side.

The two alternate in every repeat, per backend; 2 local workers (``_worker.py``: mnist-cnn, synthetic
data, batch 64 per worker); the median examples/s of each and their ratio.

    python benchmarks/batch_hooks.py --repeats 3 --steps 40 --out benchmarks/results/batch_hooks.json
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # the shared _common.py
from _common import alternate, launched_run, medians, write_json

WORKER = str(Path(__file__).with_name("_worker.py"))
MODES = ("tfdist-fit", "batch-callback")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--backends", default="tf,mpi")
    parser.add_argument("--out", default="benchmarks/results/batch_hooks.json")
    args = parser.parse_args()
    report: dict[str, object] = {"steps": args.steps, "workers": args.workers, "repeats": args.repeats}
    for backend in args.backends.split(","):
        runs = alternate(
            MODES,
            args.repeats,
            lambda mode, _, b=backend: launched_run(WORKER, b, args.workers, mode, str(args.steps))[
                "examples_per_sec"
            ],
        )
        median = medians(runs)
        ratio = median["batch-callback"] / median["tfdist-fit"]
        print(f"{backend}: {median} ratio {ratio:.3f}", flush=True)
        report[backend] = {"examples_per_sec": runs, "median": median, "batch_callback_vs_none": ratio}
    write_json(args.out, report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
