"""How close ``tfdist estimate`` comes to the peak memory of real training processes (CPU, one process), and
(``--conv``) where a convolutional model's memory goes that the estimate's dense terms do not see.

Each model is saved as a ``.keras`` file, estimated from that file (its weights unread), then trained a few
steps with plain ``model.fit`` in a fresh process (``_estimate_worker.py``) whose kernel high-water mark of
resident memory (``VmHWM``, see the worker) is the measured peak.

- by default, models of 1.2M to 101M parameters, dense and convolutional, with SGD or Adam, against the
  estimate: benchmarks/results/estimate_accuracy.json;
- ``--conv``: ResNet-50 at three batches and two image sizes, conv + batch-norm + ReLU stacks of two depths
  (the deeper one also without batch norm) and a deep stack of small dense layers, with Adam, against the
  estimate's terms without margin: what grows with the batch (activations), with the layers whatever the
  batch (the traced step's graph and kernels), and with the image size: benchmarks/results/estimate_conv.json.

    python benchmarks/estimate_accuracy.py [--conv] [MODEL ...]   # MODEL: measure again, keep other rows
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ROOT, stack, write_json

#: (model, batch per replica, optimizer)
CASES = (
    ("mnist-cnn", 64, "adam"),
    ("dense-6m", 64, "adam"),
    ("dense-50m", 64, "sgd"),
    ("dense-50m", 64, "adam"),
    ("dense-101m", 64, "adam"),
    ("resnet50-64px", 8, "adam"),
)
CONV_CASES = (
    ("resnet50-64px", 2, "adam"),
    ("resnet50-64px", 8, "adam"),
    ("resnet50-64px", 24, "adam"),
    ("resnet50-32px", 8, "adam"),
    ("convstack-8", 8, "adam"),
    ("convstack-32", 8, "adam"),
    ("convonly-32", 8, "adam"),
    ("densestack-32", 64, "adam"),
)
STEPS = 4
DENSE = {"dense-6m": (1024, [2048] * 2), "dense-50m": (4096, [4096] * 3), "dense-101m": (4096, [4096] * 6)}


def build(name: str) -> Any:
    """The named model, uncompiled."""
    import keras

    from tfdist.workloads import models

    kind, _, size = name.partition("-")
    if name == "mnist-cnn":
        return models.build("mnist-cnn", (28, 28, 1), 10)
    if kind == "resnet50":
        side = int(size.removesuffix("px"))
        return keras.applications.ResNet50(weights=None, input_shape=(side, side, 3), classes=10)
    if name in DENSE or kind == "densestack":
        inputs, widths = DENSE.get(name, (256, [256] * int(size)))
        dense = [keras.layers.Dense(w, activation="relu") for w in widths]
        return keras.Sequential([keras.Input((inputs,)), *dense, keras.layers.Dense(10)], name=kind)
    layers: list[Any] = []
    for _ in range(int(size)):  # convstack-N, convonly-N (without batch norm)
        layers.append(keras.layers.Conv2D(32, 3, padding="same", use_bias=False))
        layers += [keras.layers.BatchNormalization()] if kind == "convstack" else []
        layers.append(keras.layers.ReLU())
    tail = [keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(10)]
    return keras.Sequential([keras.Input((32, 32, 32)), *layers, *tail], name=kind)


def measure(path: str, batch: int, optimizer: str) -> dict[str, Any]:
    """Peak and idle resident memory (MiB) of a fresh process training the saved model."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "TF_ENABLE_ONEDNN_OPTS": "0"}
    worker = str(Path(__file__).with_name("_estimate_worker.py"))
    args = [sys.executable, worker, path, str(batch), optimizer, str(STEPS), "float32"]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=400, env=env, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"{path}: the training process failed:\n{proc.stderr[-2000:]}")
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def row(name: str, batch: int, optimizer: str, folder: str) -> dict[str, Any]:
    """One case estimated and measured."""
    from tfdist.estimate import plan, read

    path = os.path.join(folder, f"{name}.keras")
    if not os.path.exists(path):
        build(name).save(path)
    summary = read.from_keras_file(path)
    estimate = plan.estimate(summary, plan.EstimateConfig(batch, optimizer)).total / plan.MIB
    bare = plan.estimate(summary, plan.EstimateConfig(batch, optimizer, margin=0.0))
    measured = measure(path, batch, optimizer)
    peak, bare_mib = measured["peak_mib"], bare.total / plan.MIB
    print(
        f"{name:14} {optimizer:5} batch {batch:3}: estimate {estimate:6.0f}, measured {peak:6.0f} MiB",
        flush=True,
    )
    return {
        "model": name,
        "params": summary.params,
        "batch": batch,
        "optimizer": optimizer,
        "layers": dict(collections.Counter(layer.kind for layer in summary.layers)),
        "estimate_mib": round(estimate, 1),
        "estimate_without_margin_mib": round(bare_mib, 1),
        **{k: round(measured[k], 1) for k in ("idle_mib", "loaded_peak_mib")},
        "measured_peak_mib": round(peak, 1),
        "step_peaks_mib": measured["step_peaks_mib"],
        "error_percent": round(100 * (estimate - peak) / peak, 1),
        "unexplained_mib": round(peak - bare_mib, 1),
        "terms_mib": {t.name: round(t.bytes / plan.MIB, 1) for t in bare.terms},
    }


def main() -> None:
    """Estimate and measure every case (or those named); write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--conv", action="store_true", help="the convolutional cases (estimate_conv.json)")
    parser.add_argument(
        "--out", type=Path, help="default: benchmarks/results/estimate_accuracy.json or _conv"
    )
    parser.add_argument("models", nargs="*", help="only these models, the others' rows kept")
    args = parser.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    cases = CONV_CASES if args.conv else CASES
    out = args.out or ROOT / "benchmarks" / "results" / f"estimate_{'conv' if args.conv else 'accuracy'}.json"
    with tempfile.TemporaryDirectory() as tmp:
        rows = [row(*case, tmp) for case in cases if not args.models or case[0] in args.models]
    if args.models and out.exists():  # some cases measured again: they replace their rows, the others stay
        kept = [r for r in json.loads(out.read_text())["rows"] if r["model"] not in args.models]
        order = list(cases)  # the committed estimate_conv.json's rows name no optimizer: Adam
        rows = sorted(
            kept + rows, key=lambda r: order.index((r["model"], r["batch"], r.get("optimizer", "adam")))
        )
    what = "tfdist estimate against the peak RSS (VmHWM) of one CPU process running model.fit"
    write_json(out, {"what": what, "steps": STEPS, **stack(), "rows": rows})


if __name__ == "__main__":
    main()
