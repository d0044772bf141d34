"""One measured training process for estimate_accuracy.py: build MODEL, compile with OPTIMIZER, model.fit a
few steps on random data, then print one JSON line with the process's peak resident memory.

Usage: python _estimate_worker.py MODEL_FILE BATCH OPTIMIZER STEPS PRECISION
MODEL_FILE is a ``.keras`` file (saved without an optimizer) so the estimate reads the very same model.
Peak memory is the kernel's high-water mark of this process (``ru_maxrss``), exact rather than sampled.
"""

from __future__ import annotations

import json
import resource
import sys

import numpy as np


def main() -> None:
    """Train the saved model a few steps and print the peak RSS (MiB) and the RSS before it was loaded."""
    path, batch, optimizer, steps, precision = sys.argv[1:6]
    import keras
    import psutil

    keras.mixed_precision.set_dtype_policy(precision)
    idle = psutil.Process().memory_info().rss / 2**20
    model = keras.saving.load_model(path, compile=False)
    shape = tuple(int(d) for d in model.inputs[0].shape[1:])
    classes = int(model.outputs[0].shape[-1])
    rng = np.random.default_rng(0)
    b = int(batch)
    x = rng.random((2 * b, *shape), dtype=np.float32)
    y = rng.integers(0, classes, 2 * b)
    model.compile(optimizer=optimizer, loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(x, y, batch_size=b, epochs=int(steps) // 2, verbose=0)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    print(json.dumps({"peak_mib": peak, "idle_mib": idle, "params": int(model.count_params())}))


if __name__ == "__main__":
    main()
