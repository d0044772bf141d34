"""Time from `tfdist launch -n 2 --cpu` to the first training step vs one plain process, side by side,
and one process started through the Slurm task wrapper (`tfdist run -- python script`, as `srun` runs it).

Configurations alternate within each repeat so machine drift hits both alike. Writes JSON:
    python benchmarks/launch_to_first_step.py --repeats 5 --out benchmarks/results/launch_to_first_step.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SCRIPT = str(Path(__file__).with_name("_first_step_script.py"))


def first_step_seconds(argv: list[str], env: dict[str, str]) -> float:
    """Start argv and return the seconds until the last process printed FIRST_STEP."""
    start = time.time()
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300, check=False)
    stamps = [
        float(line.split("FIRST_STEP ")[1]) for line in proc.stdout.splitlines() if "FIRST_STEP " in line
    ]
    if proc.returncode != 0 or not stamps:
        raise RuntimeError(f"{argv} failed ({proc.returncode}): {proc.stderr[-1500:]}")
    return max(stamps) - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", default="benchmarks/results/launch_to_first_step.json")
    args = parser.parse_args()
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    env.pop("TF_CONFIG", None)
    single, launched, wrapped = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.repeats):
            launch_argv = [
                sys.executable,
                "-m",
                "tfdist",
                "launch",
                "-n",
                "2",
                "--cpu",
                "--log-dir",
                f"{tmp}/run{i}",
                SCRIPT,
            ]
            single.append(first_step_seconds([sys.executable, SCRIPT], env))
            launched.append(first_step_seconds(launch_argv, env))
            wrapper_argv = [sys.executable, "-m", "tfdist", "run", "--", sys.executable, SCRIPT]
            wrapped.append(first_step_seconds(wrapper_argv, env))
    result = {
        "benchmark": "launch_to_first_step",
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "repeats": args.repeats,
        "single_process_s": single,
        "launch_2_workers_s": launched,
        "task_wrapper_s": wrapped,
        "single_median_s": statistics.median(single),
        "launch_median_s": statistics.median(launched),
        "ratio_median": statistics.median(launched) / statistics.median(single),
        "wrapper_median_s": statistics.median(wrapped),
        "wrapper_ratio_median": statistics.median(wrapped) / statistics.median(single),
        "goal_ratio": 1.3,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))
    print(
        json.dumps(
            {
                k: result[k]
                for k in (
                    "single_median_s",
                    "launch_median_s",
                    "ratio_median",
                    "wrapper_median_s",
                    "wrapper_ratio_median",
                )
            },
            indent=2,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
