"""``tfdist bench`` across test hosts (network namespaces on this machine), uncapped and with the link capped,
plus the all-reduce across the same link the scaling model is fitted to.

For each link setting (``--links uncapped,1gbit``): cap every host's link (``scripts/testhosts.sh cap``),
measure one sum-all-reduce of several sizes across 2 hosts per backend (``tfdist.bench.probes`` through one
``tfdist launch`` per host), then run ``tfdist bench --hosts node1,node2`` (one worker per host, the
references beside the backends, repeats alternated). Last, the one-slow-host case: 3 hosts, only the last
capped (``--slow``), a short bench whose report must name it. Every result names the commit it measured and
the machine's load. Needs root (test hosts); uses the hosts prefix ``tfdb`` and subnet 10.90.0.

    python benchmarks/bench_nodes.py --out benchmarks/results/bench-nodes
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from tfdist.bench.plan import RunSpec, node_commands
from tfdist.bench.runner import run_commands

sys.path.insert(0, str(Path(__file__).parent))  # the shared _common.py
from _common import ROOT, write_json

HOSTS = str(ROOT / "scripts" / "testhosts.sh")
ENV = {**os.environ, "TFDIST_HOSTS_PREFIX": "tfdb", "TFDIST_HOSTS_SUBNET": "10.90.0"}
ON_HOST = f"{HOSTS} exec {{host}} --"
SIZES = (1024, 262144, 1048576, 2097152, 4194304)  # float32: 4 KB .. 16 MB


def hosts(*args: str) -> None:
    """``scripts/testhosts.sh ARGS`` on this benchmark's hosts."""
    subprocess.run([HOSTS, *args], env=ENV, check=True, capture_output=True, timeout=120)


def cap_all(names: list[str], rate: str) -> None:
    for name in names:
        hosts("cap", name, "off" if rate == "uncapped" else rate)


def allreduce(backend: str, out: Path, nodes: int = 2) -> dict:
    """All-reduce times of SIZES across ``nodes`` hosts through ``backend`` (median of 10 per size)."""
    run_dir = out / f"allreduce-{backend}"
    program: tuple[str, ...] = ("-m", "tfdist.bench.probes", "allreduce", "--backend", backend)
    program += ("--floats", ",".join(map(str, SIZES)), "--iters", "10", "--out", str(run_dir / "bench.json"))
    commands = node_commands(
        RunSpec(nodes, 1, backend, nodes),
        program,
        hosts=tuple(f"node{i}" for i in range(1, nodes + 1)),
        on_host=ON_HOST,
        port=29300 if backend == "tf" else 29350,
        python=sys.executable,
        threads=1,
        gpus=0,
        run_dir=str(run_dir),
        log_path=str(out / "logs" / f"allreduce-{backend}.log"),
        timeout=300,
    )
    result = run_commands(commands, timeout=400, base_env=ENV).result
    probe = {"backend": backend, "workers": nodes, "sizes": [
        {"bytes": s["bytes"], "median_s": s["median_s"], "p90_s": s["p90_s"]} for s in result["sizes"]
    ]}  # fmt: skip
    write_json(out / f"allreduce-{backend}.json", result)
    shutil.rmtree(run_dir)  # the launchers' logs: kept only when a probe fails
    shutil.rmtree(out / "logs", ignore_errors=True)
    return probe


def bench(out: Path, names: list[str], args: argparse.Namespace, *extra: str) -> None:
    cmd = [sys.executable, "-m", "tfdist", "bench", "--hosts", ",".join(names), "--on-host", ON_HOST]
    cmd += ["--workload", args.workload, "--steps", str(args.steps), "--warmup", "10"]
    cmd += ["--batch-size-per-replica", "64", "--threads", "1", "--out", str(out), *extra]
    proc = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=3600)
    (out.parent / f"{out.name}.log").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        raise SystemExit(f"tfdist bench failed ({out}):\n{(proc.stdout + proc.stderr)[-3000:]}")
    for folder in ("runs", "logs"):  # per-run logs: kept only when a run fails
        shutil.rmtree(out / folder, ignore_errors=True)


def context() -> dict:
    import tfdist

    git = ["git", "rev-parse", "HEAD"]
    commit = subprocess.run(git, cwd=ROOT, capture_output=True, text=True, timeout=30)
    return {
        # The commit checked out when this ran; the code measured is the tfdist imported (a snapshot of
        # that commit when TFDIST_BENCH_COMMIT names it: others may commit during a long run).
        "commit": os.environ.get("TFDIST_BENCH_COMMIT") or commit.stdout.strip(),
        "tfdist": str(Path(tfdist.__file__).parent),
        "load_1min": os.getloadavg()[0],
        "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", default="benchmarks/results/bench-nodes")
    parser.add_argument("--links", default="uncapped,1gbit")
    parser.add_argument("--workload", default="mnist-cnn")
    parser.add_argument("--backend", default="tf,mpi")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--slow", default="1gbit", help="the one slow host's rate ('' skips that case)")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    summary: dict = {"benchmark": "bench-nodes", "started": context(), "links": {}}
    hosts("up", "3")
    try:
        for rate in args.links.split(","):
            cap_all(["node1", "node2", "node3"], rate)
            folder = out / rate
            print(f"{rate}: all-reduce across the link", flush=True)
            probes = [allreduce(b, folder) for b in args.backend.split(",")]
            print(f"{rate}: tfdist bench", flush=True)
            before = context()
            bench(folder / "bench", ["node1", "node2"], args, "--backend", args.backend,
                  "--compare", "all", "--repeats", str(args.repeats))  # fmt: skip
            summary["links"][rate] = {"allreduce": probes, "before": before, "after": context()}
            write_json(out / "summary.json", summary)
        if args.slow:
            cap_all(["node1", "node2", "node3"], "uncapped")
            hosts("cap", "node3", args.slow)
            print(f"one slow host (node3 at {args.slow}): tfdist bench", flush=True)
            bench(out / "slow-node3", ["node1", "node2", "node3"], args, "--nodes", "1,3",
                  "--backend", "tf", "--compare", "none", "--repeats", "1")  # fmt: skip
            summary["slow"] = {"host": "node3", "rate": args.slow, "after": context()}
    finally:
        hosts("down")
    summary["finished"] = context()
    write_json(out / "summary.json", summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
