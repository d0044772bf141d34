"""One measured training process for estimate_accuracy.py: build MODEL, compile with OPTIMIZER, model.fit a
few steps on random data, then print one JSON line with the process's peak resident memory.

Usage: python _estimate_worker.py MODEL_FILE BATCH OPTIMIZER STEPS PRECISION
MODEL_FILE is a ``.keras`` file (saved without an optimizer) so the estimate reads the very same model.
Peak memory is the kernel's high-water mark of this process's own address space (``VmHWM`` in
/proc/self/status), exact rather than sampled; it is also read once the model is loaded and after every
training batch, to tell where the peak is reached. Not ``ru_maxrss``: Linux carries it over ``execve``
from the address space the process was forked from, so a measuring parent that had imported TensorFlow and
built the models (up to 1.3 GiB here) set a floor under every child's reading.
"""

from __future__ import annotations

import json
import sys

import numpy as np


def peak_mib() -> float:
    """This process's high-water mark of resident memory (its own address space) since it started or since
    the mark was reset (``/proc/self/clear_refs``, 5)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024  # kB
    raise RuntimeError("no VmHWM in /proc/self/status (Linux only)")


def main() -> None:
    """Train the saved model a few steps and print the peak RSS (MiB), the RSS before it was loaded, the
    peak once it was loaded and compiled, and the peak after each batch."""
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
    loaded = peak_mib()
    steps_seen: list[float] = []
    reading = keras.callbacks.LambdaCallback(
        on_train_batch_end=lambda *_, **__: steps_seen.append(peak_mib())
    )
    model.fit(x, y, batch_size=b, epochs=int(steps) // 2, verbose=0, callbacks=[reading])
    print(
        json.dumps(
            {
                "peak_mib": peak_mib(),
                "idle_mib": idle,
                "loaded_peak_mib": loaded,
                "step_peaks_mib": [round(p, 1) for p in steps_seen],
                "params": int(model.count_params()),
                "layers": len(model.layers),
            }
        )
    )


if __name__ == "__main__":
    main()
