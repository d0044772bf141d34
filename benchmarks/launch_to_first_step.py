"""Time from the command to the first training step: one plain process, ``tfdist launch -n 2 --cpu``, and
one process through the Slurm task wrapper (``tfdist run -- python script``, as ``srun`` runs it), of the
same small Keras script (below), the three alternated within each repeat.

    python benchmarks/launch_to_first_step.py --repeats 5 --out benchmarks/results/launch_to_first_step.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # the shared _common.py
from _common import alternate, medians, write_json

#: Builds a strategy (MultiWorkerMirroredStrategy under tfdist launch, the default alone), takes one
#: training step and prints the wall time.
SCRIPT = """import os, time
import tensorflow as tf
dist = tf.distribute
strategy = dist.MultiWorkerMirroredStrategy() if "TF_CONFIG" in os.environ else dist.get_strategy()
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.Input((8,)), tf.keras.layers.Dense(1)])
    optimizer = tf.keras.optimizers.SGD(0.01)
@tf.function
def step(x):
    def replica(x):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(model(x) ** 2)
        weights = model.trainable_variables
        optimizer.apply_gradients(zip(tape.gradient(loss, weights), weights))
        return loss
    return strategy.run(replica, args=(x,))
step(tf.ones((4, 8)))
print(f"FIRST_STEP {time.time():.6f}", flush=True)
"""


def command(name: str, script: str, run_dir: str) -> list[str]:
    """The argv of ``single``, ``launched`` or ``wrapped``."""
    if name == "launched":
        return [sys.executable, "-m", "tfdist", "launch", "-n", "2", "--cpu", "--run-dir", run_dir, script]
    if name == "wrapped":
        return [sys.executable, "-m", "tfdist", "run", "--", sys.executable, script]
    return [sys.executable, script]


def first_step_seconds(argv: list[str], env: dict[str, str]) -> float:
    """Start argv and return the seconds until the last process printed FIRST_STEP."""
    start = time.time()
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300, check=False)
    stamps = [
        float(line.split("FIRST_STEP ")[1]) for line in proc.stdout.splitlines() if "FIRST_STEP " in line
    ]
    if proc.returncode != 0 or not stamps:
        raise SystemExit(f"{argv} failed ({proc.returncode}): {proc.stderr[-1500:]}")
    return max(stamps) - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", default="benchmarks/results/launch_to_first_step.json")
    args = parser.parse_args()
    env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"} | {"TF_CPP_MIN_LOG_LEVEL": "2"}
    with tempfile.TemporaryDirectory() as tmp:
        script = os.path.join(tmp, "train.py")
        Path(script).write_text(SCRIPT)
        samples = alternate(
            ("single", "launched", "wrapped"),
            args.repeats,
            lambda name, repeat: first_step_seconds(command(name, script, f"{tmp}/run{repeat}"), env),
        )
    median = medians(samples)
    result = {
        "benchmark": "launch_to_first_step",
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "repeats": args.repeats,
        "single_process_s": samples["single"],
        "launch_2_workers_s": samples["launched"],
        "task_wrapper_s": samples["wrapped"],
        "single_median_s": median["single"],
        "launch_median_s": median["launched"],
        "ratio_median": median["launched"] / median["single"],
        "wrapper_median_s": median["wrapped"],
        "wrapper_ratio_median": median["wrapped"] / median["single"],
    }
    write_json(args.out, result)
    print(json.dumps({k: v for k, v in result.items() if "median" in k}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
