"""Unmodified Keras model.fit (with tfdist's Keras fix) vs tfdist.fit vs the TensorFlow tutorial's
hand-written strategy.run loop, each on 2 workers started by `tfdist launch`, side by side.

Same model (mnist-cnn, synthetic data), batch 64 per worker, the three configurations rotated in every
repeat; each reports examples/s of its second epoch (tracing excluded). Ratios are taken from the medians.
    python benchmarks/fit_multiworker.py --repeats 3 --steps 60 --out benchmarks/results/fit_multiworker.json
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

MODES = ("keras-fit", "tfdist-fit", "hand-loop")
WORKER = str(Path(__file__).parent / "_fit_worker.py")


def run_once(mode: str, steps: int, workers: int) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "result.json")
        cmd = [sys.executable, "-m", "tfdist", "launch", "-n", str(workers), "--cpu", "--quiet-workers"]
        cmd += ["--log-dir", os.path.join(tmp, "logs"), WORKER, mode, str(steps), out]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        if proc.returncode != 0:
            raise SystemExit(f"{mode} failed:\n{proc.stderr[-3000:]}")
        return float(json.loads(Path(out).read_text())["examples_per_sec"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", default="benchmarks/results/fit_multiworker.json")
    args = parser.parse_args()
    samples: dict[str, list[float]] = {m: [] for m in MODES}
    for repeat in range(args.repeats):
        order = MODES[repeat % len(MODES) :] + MODES[: repeat % len(MODES)]
        for mode in order:
            samples[mode].append(run_once(mode, args.steps, args.workers))
            print(f"repeat {repeat + 1}: {mode:10s} {samples[mode][-1]:8.1f} ex/s", flush=True)
    median = {m: statistics.median(v) for m, v in samples.items()}
    result = {
        "workers": args.workers,
        "steps": args.steps,
        "batch_per_worker": 64,
        "samples_examples_per_sec": samples,
        "median_examples_per_sec": median,
        "keras_fit_vs_hand_loop": median["keras-fit"] / median["hand-loop"],
        "tfdist_fit_vs_hand_loop": median["tfdist-fit"] / median["hand-loop"],
        "keras_fit_vs_tfdist_fit": median["keras-fit"] / median["tfdist-fit"],
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "samples_examples_per_sec"}, indent=2))


if __name__ == "__main__":
    main()
