"""The scaling model (tfdist.bench.scaling) fitted on 2 test hosts and checked on 4 and 8, at two link rates;
then set against a published figure: Horovod's paper (Sergeev & Del Balso, 2018) reports about 90 %
scaling efficiency at 512 GPUs (128 servers of 4 Pascal GPUs, 25 Gbit/s RoCE) for Inception V3 and
ResNet-101.

Eight test hosts (network namespaces of this machine, prefix ``tfdn``, subnet 10.96.0), one worker each; for
each link rate of ``--links``: ``tfdist bench --hosts node1..node8 --nodes 2,4,8 --backend mpi --bucket-mb 0
--compare independent`` (mnist-cnn on synthetic data, batch 64 per worker; the gradient summed after the
backward pass: the model's case). Its results.json holds the model's step beside each measured one and
its efficiency at 16 ... 1,024 nodes; ``summary.json`` the errors at 4 and 8 nodes and the paper's case.

    python benchmarks/scaling_nodes.py --out benchmarks/results/scaling-nodes
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))  # the shared _common.py
from _common import ROOT, testhosts, tfdist_bench, write_json

from tfdist.bench.scaling import Link, allreduce_s, efficiency

HOSTS = str(ROOT / "scripts" / "testhosts.sh")
HOSTS_ENV = {"TFDIST_HOSTS_PREFIX": "tfdn", "TFDIST_HOSTS_SUBNET": "10.96.0"}
ON_HOST = f"{HOSTS} exec {{host}} --"
NODES = 8

#: The paper's setting, with what the paper does not state ASSUMED from public figures of the time:
#: parameters from keras.applications; a P100 step at batch 64 from tf_cnn_benchmarks-era throughputs
#: (about 130 images/s for ResNet-101, 140 for Inception V3); 4 GPUs of a server on PCIe 3.0 (NCCL inside
#: the server, ~10 GB/s); RoCE's per-message latency ~5 us.
PAPER_NODES, PAPER_GPUS_PER_NODE, PAPER_PUBLISHED = 128, 4, 0.90
PAPER_LINK = Link(gbit_s=25.0, latency_s=5e-6)
PAPER_NODE_GBIT_S = 80.0
PAPER_MODELS = {  # parameters; seconds of one step at batch 64 on one GPU
    "ResNet-101": (44.7e6, 64 / 130),
    "Inception V3": (23.9e6, 64 / 140),
}


def hosts(*args: str) -> None:
    """``scripts/testhosts.sh ARGS`` on this benchmark's hosts."""
    testhosts(HOSTS_ENV, *args)


def bench(out: Path, steps: int, repeats: int) -> dict[str, Any]:
    """``tfdist bench`` at 2, 4 and 8 nodes, the MPI backend without buckets beside its copies."""
    names = ",".join(f"node{i}" for i in range(1, NODES + 1))
    grid = (
        "--hosts",
        names,
        "--nodes",
        "2,4,8",
        "--on-host",
        ON_HOST,
        "--backend",
        "mpi",
        "--bucket-mb",
        "0",
    )
    length = ("--steps", str(steps), "--warmup", "5", "--repeats", str(repeats), "--run-timeout", "1200")
    common = (
        "--workload",
        "mnist-cnn",
        "--dataset",
        "synthetic",
        "--compare",
        "independent",
        "--threads",
        "1",
    )
    return tfdist_bench(out, *common, *grid, *length, "--batch-size-per-replica", "64", env=HOSTS_ENV)


def paper_case() -> dict[str, Any]:
    """The model at the paper's 512 GPUs: the two-level all-reduce after the backward pass (the model's upper
    bound on the step), and the same hidden entirely behind the backward pass (its lower bound)."""
    out: dict[str, Any] = {
        "setting": {
            "nodes": PAPER_NODES,
            "gpus_per_node": PAPER_GPUS_PER_NODE,
            "link_gbit_s": PAPER_LINK.gbit_s,
            "latency_s": PAPER_LINK.latency_s,
            "node_gbit_s": PAPER_NODE_GBIT_S,
            "published_efficiency": PAPER_PUBLISHED,
        }
    }
    for name, (params, compute) in PAPER_MODELS.items():
        nbytes = 4 * params
        reduce_s = allreduce_s(PAPER_NODES, nbytes, PAPER_LINK, PAPER_GPUS_PER_NODE, PAPER_NODE_GBIT_S)
        out[name] = {
            "gradient_mb": nbytes / 1e6,
            "compute_ms": compute * 1e3,
            "allreduce_ms": reduce_s * 1e3,
            "efficiency_no_overlap": efficiency(compute + reduce_s, compute),
            "efficiency_full_overlap": efficiency(max(compute, reduce_s), compute),
            # The share of the all-reduce the published figure implies was hidden behind the backward pass.
            "implied_hidden_share": 1 - (compute / PAPER_PUBLISHED - compute) / reduce_s,
        }
    return out


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--links", default="1gbit,uncapped")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--out", default="benchmarks/results/scaling-nodes")
    args = parser.parse_args()
    out = Path(args.out)
    summary: dict[str, Any] = {
        "benchmark": "scaling-nodes",
        "date": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "load_1min_start": os.getloadavg()[0],
        "links": {},
        "paper": paper_case(),
    }
    hosts("up", str(NODES))
    try:
        for link in args.links.split(","):
            for i in range(1, NODES + 1):
                hosts("cap", f"node{i}", "off" if link == "uncapped" else link)
            results = bench(out / link, args.steps, args.repeats)
            summary["links"][link] = {
                "checked": {
                    r["name"]: {
                        "measured_step_ms": r["step_time_median_s"] * 1e3,
                        "predicted_step_ms": r["predicted_step_s"] * 1e3,
                        "error": r["predicted_error"],
                        "vs_independent": r.get("vs_independent"),
                    }
                    for r in results["runs"]
                    if "predicted_step_s" in r
                },
                "model": results.get("predictions", {}),
            }
            print(link, json.dumps(summary["links"][link]["checked"], indent=1), flush=True)
    finally:
        hosts("down")
    summary["load_1min_end"] = os.getloadavg()[0]
    write_json(out / "summary.json", summary)
    print(json.dumps(summary["paper"], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
