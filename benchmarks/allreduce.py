"""One all-reduce of mnist-cnn's gradient (1,199,882 float32) per backend, against a copy in memory.

Two worker processes on this machine, started as ``tfdist bench --diagnose`` starts its probe
(``tfdist.bench.probes allreduce``); the chief's median of ``--iters`` calls after 5 warm-up calls; the
backends and the copy alternate from repeat to repeat.

    python benchmarks/allreduce.py --repeats 3 --out benchmarks/results/allreduce.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from tfdist.bench.plan import RunSpec, command_for
from tfdist.bench.probes import memcopy_samples
from tfdist.bench.runner import run_command

sys.path.insert(0, str(Path(__file__).parent))  # the shared _common.py
from _common import alternate, medians, write_json

FLOATS = 1_199_882


def probe(backend: str, floats: str, iters: int, run_dir: Path, workers: int = 2) -> dict[str, Any]:
    """The chief's all-reduce times of ``floats`` (a count, or several comma-separated: ``sizes``) through
    ``backend``, the probe started as ``tfdist bench --diagnose`` starts it."""
    program = ("-m", "tfdist.bench.probes", "allreduce", "--backend", backend, "--floats", floats)
    program += ("--iters", str(iters), "--out", str(run_dir / "bench.json"))
    where = {"run_dir": str(run_dir), "log_path": str(run_dir / "probe.log"), "timeout": 900}
    command = command_for(
        RunSpec(workers, 1, backend), program, python=sys.executable, threads=1, gpus=0, **where
    )
    return run_command(command, timeout=1000).result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--iters", type=int, default=40)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", default="benchmarks/results/allreduce.json")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:

        def one(name: str, repeat: int) -> float:
            if name == "memcopy":  # for scale: one process copying the same floats
                return statistics.median(memcopy_samples(FLOATS, args.iters))
            return probe(name, str(FLOATS), args.iters, Path(tmp) / f"{name}{repeat}", args.workers)[
                "median_s"
            ]

        per_repeat = alternate(("tf", "mpi", "memcopy"), args.repeats, one)
    best = medians(per_repeat)
    report = {
        "benchmark": "allreduce",
        "floats": FLOATS,
        "bytes": FLOATS * 4,
        "workers": args.workers,
        "threads_per_worker": 1,
        "median_s_per_repeat": per_repeat,
        "median_s": best,
        "vs_memcopy": {name: best[name] / best["memcopy"] for name in ("tf", "mpi")},
    }
    write_json(args.out, report)
    print(json.dumps({k: report[k] for k in ("median_s", "vs_memcopy")}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
