"""Horovod's DistributedGradientTape across two test hosts: gradient buckets (overlap) against one sum.

Two test hosts (network namespaces on this machine, prefix ``tfdx``, subnet 10.91.0), one rank each, each
host's launcher bound to its own core (``taskset``), 1 thread: Horovod's TensorFlow 2 example loop
(``_hvd_worker.py hvd-tape``: mnist-cnn, synthetic data, batch 64 per rank) through ``tfdist launch
--backend mpi --nnodes 2 --hosts node1,node2``, with ``TFDIST_BUCKET_MB`` 0 (one packed sum after
``tape.gradient``) and 2 (buckets submitted as the backward pass produces them), beside ``tfdist.fit`` on
the same backend (one sum, 2 MB buckets, and 2 MB buckets polled once per wake-up: ``CONFIGS``) and
``independent`` (one unsynchronised 1-rank job per host, at the same
time). Configurations are rotated within each repeat; each ratio to ``independent`` is taken repeat by
repeat. Needs root (test hosts).

    python benchmarks/horovod_nodes.py --links 1gbit,uncapped --repeats 3 \
        --out benchmarks/results/horovod-nodes.json
"""

from __future__ import annotations

import argparse
import itertools
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
from _common import ROOT, alternate, ratio_each, write_json

HOSTS = str(ROOT / "scripts" / "testhosts.sh")
WORKER = str(ROOT / "benchmarks" / "_hvd_worker.py")
ENV = {
    **{k: v for k, v in os.environ.items() if not k.startswith(("TF_CONFIG", "SLURM_", "TFDIST_"))},
    "TFDIST_HOSTS_PREFIX": "tfdx",
    "TFDIST_HOSTS_SUBNET": "10.91.0",
    "TF_CPP_MIN_LOG_LEVEL": "2",
}
#: name -> (worker mode, the ranks' variables; None: independent, one 1-rank job per host)
CONFIGS: dict[str, tuple[str, dict[str, str] | None]] = {
    "independent": ("hvd-tape", None),
    "hvd-b0": ("hvd-tape", {"TFDIST_BUCKET_MB": "0"}),
    "hvd-b2": ("hvd-tape", {"TFDIST_BUCKET_MB": "2"}),
    "fit-b0": ("tfdist-fit", {"TFDIST_BUCKET_MB": "0"}),
    "fit-b2": ("tfdist-fit", {"TFDIST_BUCKET_MB": "2"}),
}
_ports = itertools.count(31000, 20)


def hosts(*args: str) -> None:
    """``scripts/testhosts.sh ARGS`` on this benchmark's hosts."""
    subprocess.run([HOSTS, *args], env=ENV, check=True, capture_output=True, timeout=120)


def on_host(host: str, core: int, *argv: str) -> list[str]:
    return [HOSTS, "exec", host, "--", "taskset", "-c", str(core), sys.executable, "-m", "tfdist", *argv]


def run(config: str, steps: int, tmp: Path) -> float:
    """Examples/s per rank of the timed epoch of one configuration."""
    mode, variables = CONFIGS[config]
    folder = Path(tempfile.mkdtemp(dir=tmp))
    env = {**ENV, **(variables or {})}
    common = ["launch", "--backend", "mpi", "-n", "1", "--cpu", "--quiet-workers"]
    if variables is not None:
        common += ["--nnodes", "2", "--hosts", "node1,node2", "--base-port", str(next(_ports))]
    procs = []
    for rank, host in enumerate(("node1", "node2")):
        where = ["--node-rank", str(rank)] if variables is not None else []
        argv = [*common, *where, "--run-dir", str(folder / f"logs-{host}")]
        argv += [WORKER, mode, str(steps), str(folder / f"{host}.json")]
        procs.append(
            subprocess.Popen(
                on_host(host, rank, *argv), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
            )
        )
    outputs = [p.communicate(timeout=900)[0].decode(errors="replace") for p in procs]
    if any(p.returncode for p in procs):
        raise SystemExit(f"{config} failed:\n" + "\n".join(o[-2000:] for o in outputs))
    rates = [json.loads(f.read_text()) for f in sorted(folder.glob("node*.json"))]
    if variables is None:  # two 1-rank jobs: each its own rate
        return statistics.mean(r["examples_per_sec"] for r in rates)
    return float(rates[0]["examples_per_sec"]) / int(rates[0]["ranks"])


def side_by_side(link: str, names: list[str], repeats: int, steps: int, tmp: Path) -> dict[str, Any]:
    """The configurations rotated within each repeat on one link: each one's examples/s per rank and its
    ratios to ``independent``, repeat by repeat and their median."""
    rates = alternate(
        names,
        repeats,
        lambda config, _: run(config, steps, tmp),
        show=lambda repeat, config, rate: f"{link} {config} repeat {repeat}: {rate:.0f} ex/s per rank",
    )
    return {
        config: {
            "examples_per_sec_per_rank": values,
            "vs_independent_each": ratio_each(values, rates["independent"]),
            "vs_independent_median": statistics.median(ratio_each(values, rates["independent"])),
        }
        for config, values in rates.items()
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--links", default="1gbit,uncapped")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--out", default="benchmarks/results/horovod-nodes.json")
    parser.add_argument("--configs", default=",".join(CONFIGS), help=f"a subset of {','.join(CONFIGS)}")
    args = parser.parse_args()
    names = args.configs.split(",")
    if "independent" not in names or not set(names) <= set(CONFIGS):
        parser.error(f"--configs {args.configs!r}: choose from {','.join(CONFIGS)}, independent included")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    result: dict[str, Any] = {
        "benchmark": "horovod-nodes",
        "commit": commit.stdout.strip(),
        "steps": args.steps,
        "per_rank_batch": 64,
        "load_1min_start": os.getloadavg()[0],
        "links": {},
    }
    hosts("up", "2")
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for link in args.links.split(","):
                for name in ("node1", "node2"):
                    hosts("cap", name, "off" if link == "uncapped" else link)
                result["links"][link] = side_by_side(link, names, args.repeats, args.steps, Path(tmp))
    finally:
        hosts("down")
    result["load_1min_end"] = os.getloadavg()[0]
    result["finished"] = time.strftime("%Y-%m-%d %H:%M:%S")
    write_json(args.out, result)
    for link, table in result["links"].items():
        for config, row in table.items():
            print(f"{link:>9} {config:<12} {row['vs_independent_median']:.2f}x independent")
    return 0


if __name__ == "__main__":
    sys.exit(main())
