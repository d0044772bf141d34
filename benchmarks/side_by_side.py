"""Training programs side by side: each one's examples/s, the programs alternated in every repeat (this
machine's speed moves from hour to hour). The first argument picks the set:

- ``fit``: what tfdist.fit adds to a step: ``tfdist.fit`` against Keras' ``model.fit`` and a hand-written
  ``strategy.run`` loop (the reference programs of ``tfdist bench --compare``,
  :mod:`tfdist.bench.references`), one process each on one device; examples/s after ``--warmup`` steps
  (fit_overhead.json);
- ``horovod``: a Horovod ``DistributedGradientTape`` loop against ``tfdist.fit`` on the MPI backend
  (horovod_tape.json);
- ``batch-hooks``: ``tfdist.fit`` with and without a per-step logger callback (which makes tfdist read
  results after every step), per backend (batch_hooks.json).

mnist-cnn on synthetic data, batch 64 per worker; the launched sets run ``_worker.py`` on ``--workers``
workers through ``tfdist launch``, one thread each, and report the second epoch (tracing excluded). The JSON
holds every sample and the medians, by program (``BACKEND/PROGRAM`` with several backends).

    python benchmarks/side_by_side.py fit --repeats 3 --steps 60
    python benchmarks/side_by_side.py horovod --repeats 3 --steps 60
    python benchmarks/side_by_side.py batch-hooks --repeats 3 --steps 40
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
from _common import alternate, launched_run, medians, write_json

#: set -> (its programs, the backends, the result file)
SETS = {
    "fit": (("tfdist_fit", "hand_loop", "keras_model_fit"), "local", "fit_overhead.json"),
    "horovod": (("hvd-tape", "tfdist-fit"), "mpi", "horovod_tape.json"),
    "batch-hooks": (("tfdist-fit", "batch-callback"), "tf,mpi", "batch_hooks.json"),
}
#: The one-process programs (``fit``): their module and arguments, the spec following.
MODULES = {
    "tfdist_fit": ("tfdist.bench.worker",),
    "hand_loop": ("tfdist.bench.references", "raw-tf"),
    "keras_model_fit": ("tfdist.bench.references", "keras-fit"),
}
WORKER = str(Path(__file__).with_name("_worker.py"))
THREADS = {"TF_NUM_INTRAOP_THREADS": "1", "TF_NUM_INTEROP_THREADS": "1"}


def one_process(program: str, args: argparse.Namespace, run_dir: Path) -> float:
    """A process of a ``fit`` program: examples/s of its steps after the warm-up."""
    spec = WorkerSpec(
        "train", "mnist-cnn", "synthetic", 64, args.warmup, args.steps, 10, 0, 0.0, str(run_dir)
    )
    where = {"run_dir": str(run_dir), "log_path": str(run_dir / "run.log"), "timeout": 900}
    argv, threads = ("-m", *MODULES[program], spec.to_json()), os.cpu_count() or 1
    command = command_for(
        RunSpec(1, 1, "local"), argv, python=sys.executable, threads=threads, gpus=0, **where
    )
    finished = run_command(command, timeout=900)
    return sample_from_summary(finished.result, args.warmup, finished.started_at).examples_per_sec


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("set", choices=SETS)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--warmup", type=int, default=10, help="fit: steps before the measured ones")
    parser.add_argument("--workers", type=int, default=2, help="the launched sets' workers")
    parser.add_argument("--backend", help="the launched sets' backends, comma-separated")
    parser.add_argument("--out", help="default: benchmarks/results/ and the set's file")
    args = parser.parse_args()
    programs, backends, result = SETS[args.set]
    backends = (args.backend or backends).split(",")
    names = [f"{b}/{p}" if len(backends) > 1 else p for b in backends for p in programs]
    with tempfile.TemporaryDirectory() as tmp:

        def rate(name: str, repeat: int) -> float:
            backend, _, program = name.rpartition("/")
            if args.set == "fit":
                return one_process(program, args, Path(tmp, f"{program}-{repeat}"))
            run = launched_run(
                WORKER, backend or backends[0], args.workers, program, str(args.steps), env=THREADS
            )
            return float(run["examples_per_sec"])

        samples = alternate(
            names, args.repeats, rate, show=lambda r, n, v: f"repeat {r + 1}: {n} {v:.1f} ex/s"
        )
    report = {"benchmark": args.set, "steps": args.steps, "workers": 1 if args.set == "fit" else args.workers}
    report |= {"examples_per_sec": samples, "median_examples_per_sec": medians(samples)}
    write_json(args.out or f"benchmarks/results/{result}", report)
    print(json.dumps(report["median_examples_per_sec"], indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
