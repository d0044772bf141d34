"""Horovod's API on tfdist against tfdist.fit, side by side: a ``DistributedGradientTape`` custom loop
(Horovod's TensorFlow 2 example) and ``tfdist.fit``, both on the MPI backend, ranks started by
``tfdist launch`` (``_worker.py``: mnist-cnn, synthetic data, batch 64 per rank, one thread per rank), the
two alternated in every repeat; examples/s of the second epoch (tracing excluded), and the medians' ratio.

    python benchmarks/horovod_tape.py --repeats 3 --steps 60 --out benchmarks/results/horovod_tape.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # the shared _common.py
from _common import alternate, launched_run, medians, write_json

WORKER = str(Path(__file__).with_name("_worker.py"))
MODES = ("hvd-tape", "tfdist-fit")
THREADS = {"TF_NUM_INTRAOP_THREADS": "1", "TF_NUM_INTEROP_THREADS": "1"}


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
        lambda mode, _: launched_run(WORKER, "mpi", args.ranks, mode, str(args.steps), env=THREADS)[
            "examples_per_sec"
        ],
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
    }
    write_json(args.out, result)
    print(json.dumps({k: result[k] for k in ("median_examples_per_sec", "hvd_tape_vs_tfdist_fit")}, indent=2))


if __name__ == "__main__":
    main()
