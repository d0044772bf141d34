"""Three ways to sum mnist-cnn's gradient (1.2M values) across two test hosts, side by side: float32 in one
MPI all-reduce, 16-bit as the MPI backend sends it (an all-to-all of 16-bit slices, float32 additions in rank
order, a 16-bit all-gather: ``tfdist.sync.reduce.cross_sum_bits``), and 16-bit in ONE MPI all-reduce with
MPICH's own float16 sum (``MPI.FLOAT16_T``; MPICH 5 has no bfloat16 sum: its ``BFLOAT16_T`` is null).

Two test hosts (prefix ``tfdx``, subnet 10.91.0), one rank each through ``tfdist launch --backend mpi
--nnodes 2 --hosts node1,node2``; the three sums alternate within every iteration; median of the
iterations per link, wall-clock and this process's CPU time. The 16-bit inputs are already 16-bit, as a
training step hands them over (cast in the graph). Needs root (test hosts).

    python benchmarks/half_sum_nodes.py --links 1gbit,uncapped --out benchmarks/results/half_sum_nodes.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))  # the shared _common.py
from _common import ROOT, alternate, write_json

HOSTS = str(ROOT / "scripts" / "testhosts.sh")
ENV = {
    **{k: v for k, v in os.environ.items() if not k.startswith(("TF_CONFIG", "SLURM_", "TFDIST_"))},
    "TFDIST_HOSTS_PREFIX": "tfdx",
    "TFDIST_HOSTS_SUBNET": "10.91.0",
}
FLOATS = 1_200_000


def worker(iters: int, out: str) -> None:
    """One rank: time each way of summing, alternated, and check they agree."""
    import numpy as np

    from tfdist.sync.mpi import MPISync
    from tfdist.sync.reduce import PROGRESS_S, Waiter, cross_sum_bits

    sync = MPISync()
    mpi, comm = sync.mpi, sync.reducer.cross
    # As the coordinator's thread waits beside a backward pass: no spinning, a poll every PROGRESS_S.
    waiter = Waiter(0.0, PROGRESS_S)
    rng = np.random.default_rng(sync.rank)
    values = rng.standard_normal(FLOATS).astype(np.float32)
    half = values.astype(np.float16)

    def fp32() -> Any:
        buffer = values.copy()
        waiter.wait(comm.Iallreduce(mpi.IN_PLACE, buffer, op=mpi.SUM))
        return buffer

    def alltoall() -> Any:
        return cross_sum_bits(comm, half.view(np.uint16), "fp16", waiter).view(np.float16)

    def native() -> Any:
        buffer = half.copy()
        waiter.wait(comm.Iallreduce(mpi.IN_PLACE, [buffer, mpi.FLOAT16_T], op=mpi.SUM))
        return buffer

    ways = {"fp32-allreduce": fp32, "fp16-alltoall-allgather": alltoall, "fp16-mpich-allreduce": native}

    def timed(name: str, _: int) -> tuple[float, float]:
        """Wall-clock and this process's CPU seconds of one sum, started together on both ranks."""
        comm.Barrier()
        started, used = time.perf_counter(), time.process_time()
        ways[name]()
        return time.perf_counter() - started, time.process_time() - used

    # The first 3 rounds set up connections: left out.
    rounds = {name: r[3:] for name, r in alternate(list(ways), iters + 3, timed).items()}
    samples = {name: [wall for wall, _ in r] for name, r in rounds.items()}
    cpu = {name: [used for _, used in r] for name, r in rounds.items()}
    same = bool(np.array_equal(alltoall(), native()))  # two ranks: one rounding of the same float32 sum
    if sync.rank == 0:
        result = {
            name: {
                "median_ms": statistics.median(s) * 1e3,
                # This process's CPU time (user + system: its share of the kernel's TCP work included).
                "cpu_median_ms": statistics.median(cpu[name]) * 1e3,
                "samples_ms": [x * 1e3 for x in s],
            }
            for name, s in samples.items()
        }
        result["fp16_results_identical"] = same  # type: ignore[assignment]
        Path(out).write_text(json.dumps(result, indent=2))


def hosts(*args: str) -> None:
    subprocess.run([HOSTS, *args], env=ENV, check=True, capture_output=True, timeout=120)


def run_link(iters: int, port: int, tmp: Path, extra: dict[str, str]) -> dict[str, Any]:
    out = tmp / f"result-{port}.json"
    common = ["launch", "--backend", "mpi", "-n", "1", "--cpu", "--quiet-workers"]
    common += ["--nnodes", "2", "--hosts", "node1,node2", "--base-port", str(port)]
    procs = []
    for rank, host in enumerate(("node1", "node2")):
        argv = [*common, "--node-rank", str(rank), "--run-dir", str(tmp / f"logs-{port}-{host}")]
        argv += [__file__, "worker", str(iters), str(out)]
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
        env = {**ENV, **extra}
        procs.append(subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
    outputs = [p.communicate(timeout=600)[0].decode(errors="replace") for p in procs]
    if any(p.returncode for p in procs):
        raise SystemExit("the sums failed:\n" + "\n".join(o[-2000:] for o in outputs))
    return dict(json.loads(out.read_text()))


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "worker":
        worker(int(sys.argv[2]), sys.argv[3])
        return 0
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--links", default="1gbit,uncapped")
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--out", default="benchmarks/results/half_sum_nodes.json")
    parser.add_argument("--env", action="append", default=[], help="NAME=VALUE for the ranks (repeatable)")
    args = parser.parse_args()
    extra = dict(item.split("=", 1) for item in args.env)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    result: dict[str, Any] = {
        "benchmark": "half-sum-nodes",
        "commit": commit.stdout.strip(),
        "floats": FLOATS,
        "load_1min": os.getloadavg()[0],
        "env": extra,
        "links": {},
    }
    hosts("up", "2")
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for number, link in enumerate(args.links.split(",")):
                for name in ("node1", "node2"):
                    hosts("cap", name, "off" if link == "uncapped" else link)
                result["links"][link] = run_link(args.iters, 31500 + 20 * number, Path(tmp), extra)
                ways = {k: v for k, v in result["links"][link].items() if isinstance(v, dict)}
                shown = {k: (round(v["median_ms"], 1), round(v["cpu_median_ms"], 1)) for k, v in ways.items()}
                print(link, "(wall ms, cpu ms):", shown, flush=True)
    finally:
        hosts("down")
    write_json(args.out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
