"""What tfdist.fit adds to a training step: tfdist.fit against Keras' ``model.fit`` and a hand-written
``strategy.run`` loop (the reference programs of ``tfdist bench --compare``, :mod:`tfdist.bench.references`),
one process each on one device, the same model (mnist-cnn on synthetic data) and global batch, the three
alternated in every repeat; examples/s after the warm-up steps (tracing excluded).

    python benchmarks/fit_overhead.py --repeats 3 --steps 60 --out benchmarks/results/fit_overhead.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

from tfdist.bench.config import WorkerSpec
from tfdist.bench.plan import RunSpec, command_for
from tfdist.bench.runner import run_command
from tfdist.bench.stats import sample_from_summary

sys.path.insert(0, str(Path(__file__).parent))  # the shared _common.py
from _common import alternate, medians, write_json

#: The JSON's name of each program -> its module and arguments (the spec follows).
PROGRAMS = {
    "tfdist_fit": ("tfdist.bench.worker",),
    "hand_loop": ("tfdist.bench.references", "raw-tf"),
    "keras_model_fit": ("tfdist.bench.references", "keras-fit"),
}
BATCH = 64


def examples_per_sec(name: str, steps: int, warmup: int, run_dir: Path) -> float:
    """One process of program ``name``: examples/s of its steps after the warm-up."""
    spec = WorkerSpec("train", "mnist-cnn", "synthetic", BATCH, warmup, steps, 10, 0, 0.0, str(run_dir))
    program = ("-m", *PROGRAMS[name], spec.to_json())
    threads = os.cpu_count() or 1
    command = command_for(
        RunSpec(1, 1, "local"),
        program,
        python=sys.executable,
        threads=threads,
        gpus=0,
        run_dir=str(run_dir),
        log_path=str(run_dir / "run.log"),
        timeout=900,
    )
    finished = run_command(command, timeout=900)
    return sample_from_summary(finished.result, warmup, finished.started_at).examples_per_sec


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--out", default="benchmarks/results/fit_overhead.json")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        results = alternate(
            list(PROGRAMS),
            args.repeats,
            lambda name, repeat: examples_per_sec(
                name, args.steps, args.warmup, Path(tmp, f"{name}-{repeat}")
            ),
            show=lambda repeat, name, rate: f"repeat {repeat + 1}: {name:16s} {rate:8.1f} ex/s",
        )
    median = medians(results)
    report = {
        "benchmark": "fit_overhead",
        "workload": f"mnist-cnn, synthetic 28x28x1, global batch {BATCH}, one process, one device",
        "steps": args.steps,
        "warmup": args.warmup,
        "examples_per_sec": results,
        "median_examples_per_sec": median,
        "tfdist_vs_hand_loop": median["tfdist_fit"] / median["hand_loop"],
        "tfdist_vs_keras_fit": median["tfdist_fit"] / median["keras_model_fit"],
    }
    write_json(args.out, report)
    print(json.dumps({k: v for k, v in report.items() if k.startswith(("median", "tfdist_vs"))}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
