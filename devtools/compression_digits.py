"""What the MPI backend's 16-bit wire costs in accuracy: ``tfdist train`` on its default digits job.

One process, then 2 MPI ranks with each wire (``--compression none,fp16,bf16``) and with gradient buckets,
all with the same global batch (``--global-batch-size``), seed and epochs. The ranks run with
``TFDIST_MPI_SHM=0`` (each its own node) so every gradient sum crosses MPI as between hosts. Records each
run's final training loss and accuracy, test loss and accuracy, and the largest difference of its final
weights from the one-process run's.

    python devtools/compression_digits.py --out benchmarks/results/compression_digits.json
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

ROOT = Path(__file__).resolve().parent.parent


def train(
    out: Path, epochs: int, batch: int, *extra: str, env: dict[str, str] | None = None
) -> dict[str, Any]:
    """One ``tfdist train`` (defaults: mnist-cnn on digits); its final metrics and weights file."""
    cmd = [
        sys.executable,
        "-m",
        "tfdist",
        "train",
        "--epochs",
        str(epochs),
        "--global-batch-size",
        str(batch),
    ]
    cmd += ["--run-dir", str(out), *extra]
    full_env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", **(env or {})}
    started = time.monotonic()
    proc = subprocess.run(cmd, cwd=ROOT, env=full_env, capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stdout[-2000:]}{proc.stderr[-3000:]}")
    history = json.loads(next(out.rglob("history.json")).read_text())
    return {
        "argv": cmd[3:],
        "env": env or {},
        "wall_s": time.monotonic() - started,
        **{f"final_{k}": v[-1] for k, v in history.items() if isinstance(v, list) and v},
        "model": str(out / "model.keras"),
    }


def weights_of(path: str) -> list[Any]:
    import keras

    return [w for w in keras.models.load_model(path, compile=False).get_weights()]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", default="benchmarks/results/compression_digits.json")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--global-batch-size", type=int, default=64)
    args = parser.parse_args()
    ranks = ["--workers", "2", "--backend", "mpi"]
    cases: list[tuple[str, tuple[str, ...]]] = [
        ("one process", ()),
        ("mpi exact", (*ranks, "--compression", "none", "--bucket-mb", "0")),
        ("mpi exact, 2 MB buckets", (*ranks, "--compression", "none", "--bucket-mb", "2")),
        ("mpi fp16", (*ranks, "--compression", "fp16", "--bucket-mb", "0")),
        ("mpi bf16", (*ranks, "--compression", "bf16", "--bucket-mb", "0")),
    ]
    runs: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="tfdist-compression-") as tmp:
        for number, (name, extra) in enumerate(cases):
            print(f"{name}: tfdist train {' '.join(extra)}", flush=True)
            env = {"TFDIST_MPI_SHM": "0"} if extra else {}
            runs[name] = train(Path(tmp) / str(number), args.epochs, args.global_batch_size, *extra, env=env)
        import numpy as np

        # Two references: the one process (tfdist train's 2 ranks read the digits in another order, so
        # even the exact wire differs from it), and the exact wire on the same 2 ranks (what compression
        # alone changes).
        references = {k: weights_of(runs[k]["model"]) for k in ("one process", "mpi exact")}
        for run in runs.values():
            mine = weights_of(run["model"])
            for key, reference in references.items():
                run[f"max_weight_diff_vs_{key.replace(' ', '_')}"] = float(
                    max(np.max(np.abs(a - b)) for a, b in zip(mine, reference, strict=True))
                )
        for run in runs.values():
            run.pop("model")
    report = {
        "benchmark": "compression_digits",
        "commit": subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=30
        ).stdout.strip(),
        "epochs": args.epochs,
        "global_batch_size": args.global_batch_size,
        "runs": runs,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2))
    for name, run in runs.items():
        metrics = {k: round(v, 6) for k, v in run.items() if k.startswith(("final_", "max_"))}
        print(name, metrics)
    return 0


if __name__ == "__main__":
    sys.exit(main())
