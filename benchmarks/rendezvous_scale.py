"""The rendezvous against the job's size: forming time, the server's threads and memory for 8 ... 1,024
simulated nodes (each a thread of this process running the launcher's own client, 8 workers per node),
the server alone in a child process so that its threads and memory are its own.

    python benchmarks/rendezvous_scale.py --repeats 3 --out benchmarks/results/rendezvous_scale.json

Forming time: from the first node's connect to the last node's assignment, the median of the repeats
(taken in turns across sizes); on a small machine it is mostly the simulated nodes' own threads, so the
server thread's CPU time is reported beside it. Memory: the server process's resident size and what
tracemalloc sees the rendezvous' code hold at its peak (a separate run, since tracing slows it).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))  # the shared _common.py
from _common import alternate, medians, write_json

from tfdist.errors import ConfigError
from tfdist.launcher.rendezvous import client
from tfdist.launcher.rendezvous.protocol import JoinRequest

SIZES = (8, 16, 32, 64, 128, 256, 512, 1024)
TASKS = 8
TOKEN = "bench"


def serve(nnodes: int, trace: bool) -> None:
    """The child: serve a job of ``nnodes``, print its port, then one JSON line once the job formed and
    every answer went out; stop when stdin closes."""
    import tracemalloc

    import psutil

    from tfdist.launcher.rendezvous.server import RendezvousServer

    process = psutil.Process()
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4096)
    if trace:
        tracemalloc.start()
    before = process.memory_info().rss
    server = RendezvousServer(listener, TOKEN, nnodes, 120.0, "bench:1").start()
    print(listener.getsockname()[1], flush=True)
    threads = threading.active_count()
    while server.formed is None or server.sending:
        threads = max(threads, threading.active_count())
        time.sleep(0.005)
    native = server.thread.native_id
    cpu = next((t.user_time + t.system_time for t in process.threads() if t.id == native), float("nan"))
    report: dict[str, Any] = {
        "server_cpu_s": cpu,
        "dropped": server.rejected,
        "threads": threads,
        "rss_mib": process.memory_info().rss / 2**20,
        "rss_growth_mib": (process.memory_info().rss - before) / 2**20,
        "open_files": process.num_fds(),
    }
    if trace:
        peak = tracemalloc.get_traced_memory()[1]
        report["traced_peak_mib"] = peak / 2**20
    print(json.dumps(report), flush=True)
    sys.stdin.read()
    server.stop()


def form(nnodes: int, trace: bool = False) -> dict[str, Any]:
    """One job of ``nnodes`` formed against a fresh server process: the seconds it took and the server's
    report."""
    child = subprocess.Popen(
        [sys.executable, __file__, "--serve", str(nnodes), "--trace", str(int(trace))],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None and child.stdin is not None
    held: list[socket.socket] = []
    try:
        port = int(child.stdout.readline())
        errors: list[str] = []
        done: list[float] = []

        def one(i: int) -> None:
            request = JoinRequest(
                f"node{i:04d}", TASKS, "train.py", "d", tuple(range(20000, 20000 + TASKS)), i
            )
            try:
                client.join("127.0.0.1", port, lambda: TOKEN, request, 120, hold=held, max_nodes=nnodes)
                done.append(time.monotonic())
            except ConfigError as exc:
                errors.append(str(exc))

        threads = [threading.Thread(target=one, args=(i,)) for i in range(nnodes)]
        started = time.monotonic()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=180)
        if errors or len(done) != nnodes:
            raise SystemExit(f"{nnodes} nodes: {len(done)} formed; {errors[:1]}")
        report = json.loads(child.stdout.readline())
        return {"seconds": max(done) - started, **report}
    finally:
        for sock in held:
            sock.close()
        child.stdin.close()
        child.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)))
    parser.add_argument("--out", default="benchmarks/results/rendezvous_scale.json")
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--trace", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, bool(args.trace))
        return
    sizes = args.sizes.split(",")
    samples = alternate(sizes, args.repeats, lambda n, _: form(int(n)))
    rows = []
    for n, runs in samples.items():
        row = {"nodes": int(n), "forming_s": medians({n: [s["seconds"] for s in runs]})[n]}
        row |= {"forming_samples_s": [s["seconds"] for s in runs], "threads": max(s["threads"] for s in runs)}
        row["server_cpu_s"] = medians({n: [s["server_cpu_s"] for s in runs]})[n]
        row |= {k: runs[-1][k] for k in ("open_files", "rss_mib", "rss_growth_mib")}
        rows.append({**row, "traced_peak_mib": form(int(n), trace=True)["traced_peak_mib"]})
        print(json.dumps(rows[-1]), flush=True)
    report = {
        "benchmark": "rendezvous_scale",
        "what": "a job of N simulated nodes x 8 workers forming at one rendezvous server on loopback; "
        "nodes are threads of the benchmark's process running tfdist's client, the server a child "
        "process (threads: the server process's, its main thread included)",
        "machine": {"cpus": len(os.sched_getaffinity(0)), "python": platform.python_version()},
        "repeats": args.repeats,
        "rows": rows,
    }
    write_json(args.out, report)


if __name__ == "__main__":
    main()
