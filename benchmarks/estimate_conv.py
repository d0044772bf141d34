"""Where a convolutional model's training memory goes that the estimate's dense terms do not see: peak
resident memory of plain ``model.fit`` on CPU (``_estimate_worker.py``, one fresh process per case) for
convolutional models at several batches, depths and image sizes, and a deep dense stack beside them, each
set against ``tfdist estimate``'s terms. Writes benchmarks/results/estimate_conv.json.

The cases separate what grows with the batch (activations, per-example workspace) from what grows with
the number of layers whatever the batch (the traced step's graph and kernels) and from the image size.

Run: ``.venv/bin/python benchmarks/estimate_conv.py`` (several minutes on two cores).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ROOT, stack, write_json
from estimate_accuracy import measure

#: (model, batch): ResNet-50 at three batches and two image sizes, conv + batch-norm + ReLU stacks of two
#: depths, the deeper one without batch norm, a deep stack of small dense layers.
CASES = (
    ("resnet50-64px", 2),
    ("resnet50-64px", 8),
    ("resnet50-64px", 24),
    ("resnet50-32px", 8),
    ("convstack-8", 8),
    ("convstack-32", 8),
    ("convonly-32", 8),
    ("densestack-32", 64),
)


def build(name: str) -> Any:
    """The named model, uncompiled."""
    import keras

    if name.startswith("resnet50-"):
        size = int(name.split("-")[1].removesuffix("px"))
        return keras.applications.ResNet50(weights=None, input_shape=(size, size, 3), classes=10)
    depth = int(name.split("-")[1])
    if name.startswith(("convstack-", "convonly-")):
        layers: list[Any] = []
        for _ in range(depth):
            layers.append(keras.layers.Conv2D(32, 3, padding="same", use_bias=False))
            if name.startswith("convstack-"):
                layers.append(keras.layers.BatchNormalization())
            layers.append(keras.layers.ReLU())
        tail = [keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(10)]
        return keras.Sequential([keras.Input((32, 32, 32)), *layers, *tail], name=name.replace("-", "_"))
    if name.startswith("densestack-"):
        dense = [keras.layers.Dense(256, activation="relu") for _ in range(depth)]
        return keras.Sequential([keras.Input((256,)), *dense, keras.layers.Dense(10)], name="densestack")
    raise ValueError(name)


def main() -> None:
    """Measure every case; print each against the estimate and write the JSON."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from tfdist.estimate import plan, read

    wanted = set(sys.argv[1:])
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, batch in CASES:
            if wanted and name not in wanted:
                continue
            path = os.path.join(tmp, f"{name}.keras")
            if not os.path.exists(path):
                build(name).save(path)
            summary = read.from_keras_file(path)
            result = plan.estimate(summary, plan.EstimateConfig(batch, "adam", margin=0.0))
            measured = measure(path, batch, "adam")
            kinds: dict[str, int] = {}
            for layer in summary.layers:
                kinds[layer.kind] = kinds.get(layer.kind, 0) + 1
            unexplained = measured["peak_mib"] - result.total / plan.MIB
            rows.append(
                {
                    "model": name,
                    "batch": batch,
                    "params": summary.params,
                    "layers": kinds,
                    "measured_peak_mib": round(measured["peak_mib"], 1),
                    "loaded_peak_mib": round(measured["loaded_peak_mib"], 1),
                    "step_peaks_mib": measured["step_peaks_mib"],
                    "idle_mib": round(measured["idle_mib"], 1),
                    "estimate_without_margin_mib": round(result.total / plan.MIB, 1),
                    "unexplained_mib": round(unexplained, 1),
                    "terms_mib": {t.name: round(t.bytes / plan.MIB, 1) for t in result.terms},
                }
            )
            print(
                f"{name:14} batch {batch:3}: measured {measured['peak_mib']:6.0f} MiB (loaded "
                f"{measured['loaded_peak_mib']:5.0f}, steps {measured['step_peaks_mib']}), estimate "
                f"{result.total / plan.MIB:6.0f} without margin, unexplained {unexplained:+6.0f} MiB",
                flush=True,
            )
    out = ROOT / "benchmarks" / "results" / "estimate_conv.json"
    if wanted and out.exists():  # some cases measured again: they replace their rows, the others stay
        kept = [r for r in json.loads(out.read_text())["rows"] if r["model"] not in wanted]
        order = [name for name, _ in CASES]
        rows = sorted(kept + rows, key=lambda r: (order.index(r["model"]), r["batch"]))
    if rows:
        write_json(
            out,
            {
                "what": "peak RSS (VmHWM) of one CPU process running model.fit (Adam, 4 steps) against "
                "tfdist estimate's terms without margin; unexplained = measured - estimate",
                **stack(),
                "rows": rows,
            },
        )


if __name__ == "__main__":
    main()
