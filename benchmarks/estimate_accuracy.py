"""How close ``tfdist estimate`` comes to the peak memory of real training processes (CPU, one process).

Each model is saved as a ``.keras`` file, estimated from that file (its weights unread), then trained a few
steps with plain ``model.fit`` in a fresh process (``_estimate_worker.py``) whose kernel high-water mark of
resident memory (``VmHWM``, see the worker) is the measured peak. Writes
benchmarks/results/estimate_accuracy.json.

Run: ``.venv/bin/python benchmarks/estimate_accuracy.py`` (a few minutes on two cores).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ROOT, stack, write_json

#: (name, batch per replica, optimizer): small to >100M parameters, dense and convolutional.
CASES = (
    ("mnist-cnn", 64, "adam"),
    ("dense-6m", 64, "adam"),
    ("dense-50m", 64, "sgd"),
    ("dense-50m", 64, "adam"),
    ("dense-101m", 64, "adam"),
    ("resnet50-64px", 8, "adam"),
)
STEPS = 4


def build(name: str) -> Any:
    """The named model, uncompiled."""
    import keras

    from tfdist.workloads import models

    def dense(inputs: int, widths: list[int]) -> Any:
        layers = [keras.layers.Dense(w, activation="relu") for w in widths]
        return keras.Sequential([keras.Input((inputs,)), *layers, keras.layers.Dense(10)], name=name)

    if name == "mnist-cnn":
        return models.build("mnist-cnn", (28, 28, 1), 10)
    if name == "dense-6m":
        return dense(1024, [2048, 2048])
    if name == "dense-50m":
        return dense(4096, [4096] * 3)
    if name == "dense-101m":
        return dense(4096, [4096] * 6)
    if name == "resnet50-64px":
        return keras.applications.ResNet50(weights=None, input_shape=(64, 64, 3), classes=10)
    raise ValueError(name)


def measure(path: str, batch: int, optimizer: str) -> dict[str, Any]:
    """Peak and idle resident memory (MiB) of a fresh process training the saved model."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "TF_ENABLE_ONEDNN_OPTS": "0"}
    worker = str(Path(__file__).with_name("_estimate_worker.py"))
    args = [sys.executable, worker, path, str(batch), optimizer, str(STEPS), "float32"]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=400, env=env, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"{path}: the training process failed:\n{proc.stderr[-2000:]}")
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def main() -> None:
    """Estimate and measure every case; print the table and write the JSON."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from tfdist.estimate import plan, read

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, batch, optimizer in CASES:
            path = os.path.join(tmp, f"{name}.keras")
            if not os.path.exists(path):
                build(name).save(path)
            result = plan.estimate(read.from_keras_file(path), plan.EstimateConfig(batch, optimizer))
            measured = measure(path, batch, optimizer)
            estimate_mib = result.total / plan.MIB
            error = 100 * (estimate_mib - measured["peak_mib"]) / measured["peak_mib"]
            rows.append(
                {
                    "model": name,
                    "params": result.params,
                    "batch": batch,
                    "optimizer": optimizer,
                    "estimate_mib": round(estimate_mib, 1),
                    "measured_peak_mib": round(measured["peak_mib"], 1),
                    "idle_mib": round(measured["idle_mib"], 1),
                    "error_percent": round(error, 1),
                    "terms_mib": {t.name: round(t.bytes / plan.MIB, 1) for t in result.terms},
                }
            )
            print(
                f"{name:14} {result.params:>12,} {optimizer:5} batch {batch:3}: "
                f"estimate {estimate_mib:7.0f} MiB, "
                f"measured {measured['peak_mib']:7.0f} MiB ({error:+.1f} %)",
                flush=True,
            )
    write_json(
        ROOT / "benchmarks" / "results" / "estimate_accuracy.json",
        {
            "what": "tfdist estimate vs the peak RSS (VmHWM) of one CPU process running model.fit",
            "steps": STEPS,
            **stack(),
            "rows": rows,
        },
    )


if __name__ == "__main__":
    main()
