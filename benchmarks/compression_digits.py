"""What the MPI backend's 16-bit wire costs in accuracy: ``tfdist train`` on its default digits job.

One process, then 2 MPI ranks with each wire (``--compression none,fp16,bf16``) and with gradient buckets,
all with the same global batch, seed and epochs. The ranks run with ``TFDIST_MPI_SHM=0`` (each its own
node) so every gradient sum crosses MPI as between hosts. Records each run's final training and test loss
and accuracy, and the largest difference of its final weights from the one process's and from the exact
wire's on the same 2 ranks (what compression alone changes: the 2 ranks read the digits in another order
than one process, so even the exact wire differs from it).

    python benchmarks/compression_digits.py --out benchmarks/results/compression_digits.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))  # the shared _common.py
from _common import ROOT, write_json

RANKS = ("--workers", "2", "--backend", "mpi")
CASES: dict[str, tuple[str, ...]] = {
    "one process": (),
    "mpi exact": (*RANKS, "--compression", "none", "--bucket-mb", "0"),
    "mpi exact, 2 MB buckets": (*RANKS, "--compression", "none", "--bucket-mb", "2"),
    "mpi fp16": (*RANKS, "--compression", "fp16", "--bucket-mb", "0"),
    "mpi bf16": (*RANKS, "--compression", "bf16", "--bucket-mb", "0"),
}


def train(out: Path, epochs: int, batch: int, extra: tuple[str, ...]) -> dict[str, Any]:
    """One ``tfdist train`` (its defaults: mnist-cnn on digits): its final metrics and its weights."""
    import keras

    cmd = [sys.executable, *f"-m tfdist train --epochs {epochs} --global-batch-size {batch}".split()]
    cmd += ["--run-dir", str(out), *extra]
    env = {"TF_CPP_MIN_LOG_LEVEL": "2", **({"TFDIST_MPI_SHM": "0"} if extra else {})}
    started = time.monotonic()
    proc = subprocess.run(
        cmd, cwd=ROOT, env={**os.environ, **env}, capture_output=True, text=True, timeout=1800
    )
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stdout[-2000:]}{proc.stderr[-3000:]}")
    history = json.loads(next(out.rglob("history.json")).read_text())
    run = {"argv": cmd[3:], "env": env, "wall_s": time.monotonic() - started}
    run |= {f"final_{k}": v[-1] for k, v in history.items() if isinstance(v, list) and v}
    return {**run, "weights": keras.models.load_model(out / "model.keras", compile=False).get_weights()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="benchmarks/results/compression_digits.json")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--global-batch-size", type=int, default=64)
    args = parser.parse_args()
    import numpy as np

    with tempfile.TemporaryDirectory(prefix="tfdist-compression-") as tmp:
        runs = {}
        for number, (name, extra) in enumerate(CASES.items()):
            print(f"{name}: tfdist train {' '.join(extra)}", flush=True)
            runs[name] = train(Path(tmp) / str(number), args.epochs, args.global_batch_size, extra)
    for run in runs.values():
        for key in ("one process", "mpi exact"):
            diffs = (np.max(np.abs(a - b)) for a, b in zip(run["weights"], runs[key]["weights"], strict=True))
            run[f"max_weight_diff_vs_{key.replace(' ', '_')}"] = float(max(diffs))
    for run in runs.values():
        run.pop("weights")
    git = ["git", "rev-parse", "HEAD"]
    commit = subprocess.run(git, cwd=ROOT, capture_output=True, text=True, timeout=30).stdout.strip()
    report = {"benchmark": "compression_digits", "commit": commit, "epochs": args.epochs, "runs": runs}
    write_json(args.out, {**report, "global_batch_size": args.global_batch_size})
    for name, run in runs.items():
        print(name, {k: round(v, 6) for k, v in run.items() if k.startswith(("final_", "max_"))})
    return 0


if __name__ == "__main__":
    sys.exit(main())
