"""What name matching costs the MPI synchroniser: one named all-reduce through the coordinator
(``MPISync.allreduce(..., name=...)``: a round that agrees on the name, then the packed sum) against the
packed sum alone (``MPISync.packed_sum``, the path of the step's unnamed sum), on 2 ranks started by
`tfdist launch`.

Sizes: one float (a barrier, the metric sums of an evaluation step) and mnist-cnn's 1,199,882 gradient
floats. Blocks of --iters calls of each path alternate (--blocks of each), after a warm-up; the chief
reports the median time per call of each path and size.
    python benchmarks/horovod_sync_overhead.py --out benchmarks/results/horovod_sync_overhead.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))  # the shared _common.py
from _common import alternate, medians, write_json

SIZES = {"1 float": 1, "mnist-cnn gradient (1,199,882 floats)": 1_199_882}


def worker(out: Path, iters: int, blocks: int) -> None:
    """One rank: time both paths, alternating blocks; rank 0 writes the medians (ms) to ``out``."""
    import numpy as np

    from tfdist.sync import process_sync

    sync = process_sync("mpi")
    paths = {
        "coordinated": lambda parts: sync.allreduce(parts, keep=len(parts), name="bench"),
        "direct": lambda parts: sync.packed_sum(parts, keep=len(parts)),
    }

    def side_by_side(parts: list[Any]) -> dict[str, float]:
        """The median ms per call of each path on ``parts``: after a warm-up (shared windows, the
        coordinator's thread), blocks of ``iters`` calls of one path, started together on every rank."""
        for call in paths.values():
            for _ in range(5):
                call(parts)

        def block(name: str, _: int) -> list[float]:
            sync.barrier()
            times = []
            for _ in range(iters):
                started = time.perf_counter()
                paths[name](parts)
                times.append(time.perf_counter() - started)
            return times

        blocks_of = alternate(list(paths), blocks, block)
        return medians({name: [t * 1e3 for b in bs for t in b] for name, bs in blocks_of.items()})

    report = {label: side_by_side([np.ones(n, np.float32)]) for label, n in SIZES.items()}
    if sync.rank == 0:
        out.write_text(json.dumps(report))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=50)
    parser.add_argument("--blocks", type=int, default=6)
    parser.add_argument("--out", default="benchmarks/results/horovod_sync_overhead.json")
    parser.add_argument("--worker", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(Path(args.worker), args.iters, args.blocks)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        result = Path(tmp) / "result.json"
        cmd = [sys.executable, "-m", "tfdist", "launch", "--backend", "mpi", "-n", "2", "--cpu"]
        cmd += ["--quiet-workers", "--run-dir", str(Path(tmp) / "logs"), __file__]
        cmd += ["--iters", str(args.iters), "--blocks", str(args.blocks), "--worker", str(result)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        if proc.returncode != 0:
            raise SystemExit(f"the run failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
        per_call = json.loads(result.read_text())
    report = {
        "benchmark": "horovod_sync_overhead",
        "ranks": 2,
        "iters_per_block": args.iters,
        "blocks_per_path": args.blocks,
        "median_ms_per_call": per_call,
        "coordinated_minus_direct_ms": {k: v["coordinated"] - v["direct"] for k, v in per_call.items()},
    }
    write_json(args.out, report)
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
