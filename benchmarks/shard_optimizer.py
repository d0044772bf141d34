"""Optimizer-state sharding against plain data parallelism on the MPI backend: peak memory per rank and step
time of a dense model of 100.7M float32 parameters trained with Adam, on 2 and 4 ranks, in three modes:
``unsharded``; ``sharded`` (ZeRO stage 1: one reduce-scatter after the backward pass); ``sharded-buckets``
(``bucket_mb=16``: each bucket reduce-scattered as the backward pass produces it and its gradients released,
stage 2's saving). Each is a fresh ``tfdist launch --backend mpi -n N`` of this file's worker
(``tfdist.fit``, a few steps), the modes alternated.

Every rank reports two high-water marks of its resident memory: ``setup_peak_mib``, the kernel's ``VmHWM``
when training begins (TensorFlow, the model, the first broadcast of the weights), read just before it is
reset (``/proc/self/clear_refs``, 5); ``train_peak_mib``, ``VmHWM`` after the steps: training alone, where
the optimizer's slots live. Expected from the arithmetic, float32: unsharded, weights + gradients + 2 Adam
slots on every rank; sharded, the slots / N; in buckets, the gradients / N too.

    python benchmarks/shard_optimizer.py --ranks 2,4 --repeats 2 --steps 5   # about 3 GiB per rank
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ROOT, alternate, write_json
from _estimate_worker import peak_mib  # VmHWM

RESULT = ROOT / "benchmarks" / "results" / "shard_optimizer.json"
MODES = ("unsharded", "sharded", "sharded-buckets")
BUCKET_MB = 16.0  # each 4096 x 4096 kernel (64 MiB) closes a bucket: one bucket per layer
WIDTH, DEPTH, BATCH_PER_RANK = 4096, 6, 8
MIB = 2**20
PEAKS = ("run_peak_mib", "setup_peak_mib", "train_peak_mib")  # see the worker


def worker(mode: str, steps: int, out: str) -> None:
    """One rank: tfdist.fit of the dense model with Adam, then this rank's figures as JSON."""
    import resource

    import numpy as np

    import tfdist

    strategy = tfdist.strategy()
    import keras

    setup: list[float] = []

    class Peaks(keras.callbacks.Callback):
        """Keeps the high-water mark so far (set-up) and resets it when training begins."""

        def on_train_begin(self, logs: Any = None) -> None:
            setup.append(peak_mib())
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")

    ranks = tfdist.world_size()
    keras.utils.set_random_seed(0)
    with strategy.scope():
        layers = [keras.layers.Dense(WIDTH, activation="relu") for _ in range(DEPTH)]
        model = keras.Sequential([keras.Input((WIDTH,)), *layers, keras.layers.Dense(10)])
        model.compile(optimizer=keras.optimizers.Adam(1e-4), loss="mse")
    rows = BATCH_PER_RANK * ranks * steps
    x = np.random.default_rng(0).normal(size=(rows, WIDTH)).astype("float32")
    y = np.zeros((rows, 10), "float32")
    history = tfdist.fit(
        model,
        (x, y),
        epochs=1,
        batch_size=BATCH_PER_RANK * ranks,
        shuffle=False,
        verbose=0,
        log_every=1,  # a sync point per step: the timeline holds every step's end
        callbacks=[Peaks()],
        shard_optimizer=mode != "unsharded",
        bucket_mb=BUCKET_MB if mode == "sharded-buckets" else None,
    )
    ends = [t for _, t in history.summary["timeline"]]
    result = {
        "params": int(model.count_params()),
        # ru_maxrss is the kernel's same high-water mark, reset with it: the run's is the larger of the two.
        "run_peak_mib": max(setup[0], resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        "setup_peak_mib": setup[0],
        "train_peak_mib": peak_mib(),
        # The first step traces the function: left out of the step time.
        "step_s": [b - a for a, b in itertools.pairwise(ends)],
    }
    with open(f"{out}.rank-{tfdist.rank()}", "w") as f:
        json.dump(result, f)


def run(mode: str, ranks: int, steps: int) -> dict[str, Any]:
    """One launch of ``ranks`` workers; every rank's figures."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "result")
        cmd = [sys.executable, "-m", "tfdist", "launch", "-n", str(ranks), "--cpu", "--backend", "mpi"]
        cmd += ["--run-dir", os.path.join(tmp, "logs"), __file__, "worker", mode, str(steps), out]
        env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "TF_ENABLE_ONEDNN_OPTS": "0"}
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env)
        if proc.returncode != 0:
            raise SystemExit(f"{mode} on {ranks} ranks failed:\n{proc.stderr[-3000:]}")
        per_rank = [json.loads(Path(f"{out}.rank-{r}").read_text()) for r in range(ranks)]
    figures = {k: [round(r[k], 1) for r in per_rank] for k in PEAKS}
    step_s = round(statistics.median(s for r in per_rank for s in r["step_s"]), 4)
    return {"params": per_rank[0]["params"], **figures, "step_s": step_s}


def expected_mib(params: int, ranks: int, mode: str) -> dict[str, float]:
    """Weights + gradients + Adam's two slots (the slots / ranks when sharded, the gradients too in
    buckets), float32."""
    slots = 2 * params / (1 if mode == "unsharded" else ranks)
    grads = params / (ranks if mode == "sharded-buckets" else 1)
    return {
        "model_state_mib": round((params + grads + slots) * 4 / MIB, 1),
        "slots_mib": round(slots * 4 / MIB, 1),
    }


def summarise(samples: dict[str, list[dict[str, Any]]], ranks: int) -> dict[str, Any]:
    """Medians over the repeats of the largest rank's peaks and of the step time, and their ratios."""
    row: dict[str, Any] = {"runs": samples}
    for mode, runs in samples.items():
        row[mode] = {k: statistics.median(max(r[k]) for r in runs) for k in PEAKS}
        row[mode]["step_s"] = statistics.median(r["step_s"] for r in runs)
        row[mode]["expected"] = expected_mib(runs[0]["params"], ranks, mode)
    plain = row["unsharded"]
    for mode in MODES[1:]:
        sharded = row[mode]
        sharded["train_peak_saved_mib"] = round(plain["train_peak_mib"] - sharded["train_peak_mib"], 1)
        sharded["expected_saved_mib"] = round(
            plain["expected"]["model_state_mib"] - sharded["expected"]["model_state_mib"], 1
        )
        sharded["step_time_ratio_over_unsharded"] = round(sharded["step_s"] / plain["step_s"], 3)
    return row


def main() -> None:
    """Alternate sharded and unsharded runs on each rank count; write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", default="2,4", help="rank counts, comma-separated")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--steps", type=int, default=6, help="training steps per run (the first is traced)")
    parser.add_argument("--out", default=str(RESULT))
    args = parser.parse_args()
    report: dict[str, Any] = {
        "model": f"dense {WIDTH}x{DEPTH} + 10, Adam, batch {BATCH_PER_RANK} per rank",
        "steps": args.steps,
        "repeats": args.repeats,
        "cpus": os.cpu_count(),
        "by_ranks": {},
    }
    for ranks in (int(n) for n in args.ranks.split(",")):
        samples = alternate(
            MODES,
            args.repeats,
            lambda mode, _repeat, n=ranks: run(mode, n, args.steps),
            show=lambda repeat, mode, s, n=ranks: f"{n} ranks, repeat {repeat}, {mode}: {s}",
        )
        report["by_ranks"][str(ranks)] = summarise(samples, ranks)
        write_json(args.out, report)  # after each rank count: a long run keeps what it measured
    print(json.dumps({k: {m: v[m] for m in MODES} for k, v in report["by_ranks"].items()}, indent=1))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "worker":
        worker(sys.argv[2], int(sys.argv[3]), sys.argv[4])
    else:
        main()
