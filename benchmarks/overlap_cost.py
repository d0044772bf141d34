"""What overlapping a gradient sum with the backward pass costs on a one-core host, and what it saves.

Two test hosts (prefix ``tfdo``, subnet 10.93.0), one rank each pinned to its own core (``taskset``), through
``tfdist launch --backend mpi --nnodes 2 --hosts node1,node2``. Each rank alternates, within every round:

- ``compute``: a fixed TensorFlow computation on one thread (matrix products sized to about
  ``--compute-ms`` on an idle core), alone;
- ``sum``: mnist-cnn's gradient (1.2M float32, 4.8 MB) summed across the link as the MPI backend's step does
  without buckets (``Iallreduce`` completed by the step's own waiter: spin, then sleep between polls);
- ``serial``: the computation, then the sum (the step without buckets);
- ``overlap-P``: the sum started in a background thread polling every P microseconds (the coordinator's
  waiter: ``tfdist.sync.reduce.PROGRESS_S``) while the computation runs; done when both are.

For each: wall-clock median, the computation's own time (how much the polling slowed it), the sum's time and
this process's CPU time. The sum's wire time at the link's rate is ``bytes / rate``; ``serial`` is bounded
below by compute + wire and ``overlap-P`` by max(compute, wire).

    python benchmarks/overlap_cost.py --links 1gbit,uncapped --out benchmarks/results/overlap_cost.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))  # the shared _common.py
from _common import ROOT, alternate, write_json

HOSTS = str(ROOT / "scripts" / "testhosts.sh")
ENV = {
    **{k: v for k, v in os.environ.items() if not k.startswith(("TF_CONFIG", "SLURM_", "TFDIST_"))},
    "TFDIST_HOSTS_PREFIX": "tfdo",
    "TFDIST_HOSTS_SUBNET": "10.93.0",
}
FLOATS = 1_200_000  # mnist-cnn's gradient
PROGRESS_US = (100, 200, 500, 1000, 2000)


def _timed(fn: Any) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def worker(iters: int, compute_ms: float, out: str) -> None:
    """One rank: every way, alternated; the results on rank 0."""
    import numpy as np
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    from tfdist.sync.mpi import MPISync
    from tfdist.sync.reduce import Waiter

    sync = MPISync()
    mpi, comm = sync.mpi, sync.reducer.cross
    values = np.random.default_rng(sync.rank).standard_normal(FLOATS).astype(np.float32)
    side = 256
    a = tf.random.normal([side, side], seed=1)

    @tf.function
    def kernel(x: Any, n: Any) -> Any:
        for _ in tf.range(n):
            x = tf.tanh(tf.matmul(x, a) * 0.01)
        return x

    kernel(a, tf.constant(1)).numpy()  # traced
    per = min(_timed(lambda: kernel(a, tf.constant(50)).numpy()) for _ in range(3)) / 50
    reps = tf.constant(max(1, round(compute_ms / 1e3 / per)))
    step_waiter = sync.reducer.waiter  # the unbucketed step's: spins first

    def compute() -> float:
        t = time.perf_counter()
        kernel(a, reps).numpy()
        return time.perf_counter() - t

    def total(waiter: Waiter) -> float:
        t = time.perf_counter()
        buffer = values.copy()
        waiter.wait(comm.Iallreduce(mpi.IN_PLACE, buffer, op=mpi.SUM))
        return time.perf_counter() - t

    def overlapped(progress_us: int) -> tuple[float, float]:
        waiter = Waiter(0.0, progress_us / 1e6, 16)
        took: list[float] = []
        thread = threading.Thread(target=lambda: took.append(total(waiter)))
        thread.start()
        c = compute()
        thread.join()
        return c, took[0]

    def run(name: str, _: int) -> dict[str, float]:
        comm.Barrier()
        started, used = time.perf_counter(), time.process_time()
        c = s = 0.0
        if name == "compute":
            c = compute()
        elif name == "sum":
            s = total(step_waiter)
        elif name == "serial":
            c = compute()
            s = total(step_waiter)
        else:
            c, s = overlapped(int(name.split("-")[1]))
        return {
            "wall": time.perf_counter() - started,
            "compute": c,
            "sum": s,
            "cpu": time.process_time() - used,
        }

    names = ["compute", "sum", "serial", *(f"overlap-{p}" for p in PROGRESS_US)]
    rounds = {name: r[2:] for name, r in alternate(names, iters + 2, run).items()}  # 2 to warm up
    if sync.rank == 0:
        result = {
            name: {key: statistics.median(s[key] for s in samples) * 1e3 for key in samples[0]}
            for name, samples in rounds.items()
        }
        result["bytes"] = {"sum": 4.0 * FLOATS}
        Path(out).write_text(json.dumps(result, indent=2))


def hosts(*args: str) -> None:
    subprocess.run([HOSTS, *args], env=ENV, check=True, capture_output=True, timeout=120)


def run_link(iters: int, compute_ms: float, port: int, tmp: Path) -> dict[str, Any]:
    out = tmp / f"result-{port}.json"
    common = ["launch", "--backend", "mpi", "-n", "1", "--cpu", "--quiet-workers"]
    common += ["--nnodes", "2", "--hosts", "node1,node2", "--base-port", str(port)]
    procs = []
    for rank, host in enumerate(("node1", "node2")):
        argv = [*common, "--node-rank", str(rank), "--run-dir", str(tmp / f"logs-{port}-{host}")]
        argv += [__file__, "worker", str(iters), str(compute_ms), str(out)]
        command = [
            HOSTS,
            "exec",
            host,
            "--",
            "taskset",
            "-c",
            str(rank),
            sys.executable,
            "-m",
            "tfdist",
            *argv,
        ]
        procs.append(subprocess.Popen(command, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
    outputs = [p.communicate(timeout=900)[0].decode(errors="replace") for p in procs]
    if any(p.returncode for p in procs):
        raise SystemExit("the ranks failed:\n" + "\n".join(o[-2000:] for o in outputs))
    return dict(json.loads(out.read_text()))


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "worker":
        worker(int(sys.argv[2]), float(sys.argv[3]), sys.argv[4])
        return 0
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--links", default="1gbit,uncapped")
    parser.add_argument("--iters", type=int, default=15)
    parser.add_argument("--compute-ms", type=float, default=55.0)
    parser.add_argument("--out", default="benchmarks/results/overlap_cost.json")
    args = parser.parse_args()
    result: dict[str, Any] = {
        "benchmark": "overlap-cost",
        "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "load_1min": os.getloadavg()[0],
        "compute_ms_asked": args.compute_ms,
        "links": {},
    }
    hosts("up", "2")
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for number, link in enumerate(args.links.split(",")):
                for name in ("node1", "node2"):
                    hosts("cap", name, "off" if link == "uncapped" else link)
                found = run_link(args.iters, args.compute_ms, 31700 + 20 * number, Path(tmp))
                result["links"][link] = found
                for name, row in found.items():
                    print(link, name, {k: round(v, 1) for k, v in row.items()}, flush=True)
    finally:
        hosts("down")
    write_json(args.out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
