"""Beyond this machine, on paper: the MPI backend's weak-scaling efficiency at 2-256 workers predicted by
``tfdist bench``'s all-reduce model (:mod:`tfdist.bench.scaling`) with the backend's software costs measured
here: one all-reduce of 4 KB-64 MB over 2 workers per backend (``allreduce.py``'s probe) fitted to
t = 2 alpha + n beta (alpha from the smallest size, beta from the two largest: past the caches, as the
gradients predicted for are). For ResNet-50's and MobileNetV2's gradients on 10/25/100 Gbit/s links, 8 GPUs
per node: compute / (compute + all-reduce) of one flat ring over every worker and of two levels (inside each
node, then a ring across nodes), every hop costing the link's time plus the software's (no pipelining of
copies with sends: a conservative choice). The step's compute and the network's latency are ASSUMED.

    python benchmarks/scaling_model.py --out benchmarks/results/scaling_model.json
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

from tfdist.bench.scaling import Link, allreduce_s, efficiency

sys.path.insert(0, str(Path(__file__).parent))  # the shared _common.py
from _common import write_json
from allreduce import probe

SIZES = (1024, 16384, 262144, 1048576, 4194304, 16777216)  # floats: 4 KB .. 64 MB
WORKERS = (2, 4, 8, 16, 32, 64, 128, 256)
LINKS_GBPS = (10, 25, 100)
NET_LATENCY_S = 10e-6  # ASSUMED per-message network latency (Ethernet/TCP order; InfiniBand is ~2 us)
GPUS_PER_NODE = 8
NODE_GBPS = 800.0  # ASSUMED bandwidth inside a node (NVLink-class, 100 GB/s)
#: ASSUMED compute of one step at batch 64 per GPU, fp32, a V100-class GPU (published single-GPU
#: throughputs: ResNet-50 ~360 images/s, MobileNetV2 ~1,000 images/s).
COMPUTE_MS = {"ResNet-50": 178.0, "MobileNetV2": 64.0}


def measure(backend: str, iters: int) -> list[dict[str, Any]]:
    """All-reduce times of every size of SIZES over 2 workers through ``backend``."""
    with tempfile.TemporaryDirectory() as tmp:
        sizes = probe(backend, ",".join(map(str, SIZES)), iters, Path(tmp))["sizes"]
    return [{"bytes": s["bytes"], "median_s": s["median_s"]} for s in sizes]


def fit(points: list[dict[str, Any]]) -> dict[str, Any]:
    """alpha, beta of t = 2 alpha + n beta: beta from the two largest sizes (a line over every size is
    pulled off by the step between in-cache and out-of-cache sizes), alpha from the smallest."""
    (n0, t0), (n1, t1), (n2, t2) = ((p["bytes"], p["median_s"]) for p in (points[0], points[-2], points[-1]))
    beta = (t2 - t1) / (n2 - n1)
    return {"alpha_s": max((t0 - n0 * beta) / 2, 0.0), "beta_s_per_byte": beta, "measured": points}


def rate(seconds_per_byte: float) -> float:
    """The Gbit/s of a hop costing ``seconds_per_byte``: the model's links carry the software's cost too."""
    return 8 / (seconds_per_byte * 1e9)


def predict(software: dict[str, Any], nbytes: float, compute_s: float) -> dict[str, Any]:
    """Efficiency for every link speed and worker count, flat ring and two levels."""
    alpha, beta_sw = software["alpha_s"] + NET_LATENCY_S, software["beta_s_per_byte"]
    node_gbps = rate(beta_sw + 8 / (NODE_GBPS * 1e9))  # a hop inside a node
    out: dict[str, Any] = {}
    for gbps in LINKS_GBPS:
        beta_net = 8 / (gbps * 1e9)
        rows = []
        for p in WORKERS:
            # One ring over every worker, ordered by node: inside one node every hop is the node's bus.
            ring = allreduce_s(
                p, nbytes, Link(node_gbps if p <= GPUS_PER_NODE else rate(beta_sw + beta_net), alpha)
            )
            # Two levels: each of a node's g workers sends its 1/g of the gradient across at once.
            g, nodes = min(GPUS_PER_NODE, p), max(p // GPUS_PER_NODE, 1)
            across = Link(rate(beta_net + beta_sw / g), alpha)
            two = (
                allreduce_s(nodes, nbytes, across, g, node_gbps)
                if g > 1
                else allreduce_s(nodes, nbytes, across)
            )
            row = {"workers": p, "ring_allreduce_ms": ring * 1e3, "two_level_allreduce_ms": two * 1e3}
            row["ring_efficiency"] = efficiency(compute_s + ring, compute_s)
            rows.append(row | {"two_level_efficiency": efficiency(compute_s + two, compute_s)})
        out[f"{gbps}Gbps"] = rows
    return out


def parameters() -> dict[str, int]:
    """Trainable parameters of ResNet-50 and MobileNetV2 (keras.applications, no weights downloaded)."""
    import keras

    nets = {"ResNet-50": keras.applications.ResNet50, "MobileNetV2": keras.applications.MobileNetV2}
    return {
        name: int(sum(v.numpy().size for v in build(weights=None).trainable_weights))
        for name, build in nets.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--out", default="benchmarks/results/scaling_model.json")
    args = parser.parse_args()
    fits = {backend: fit(measure(backend, args.iters)) for backend in ("tf", "mpi")}
    sizes = parameters()
    predictions = {name: predict(fits["mpi"], sizes[name] * 4, COMPUTE_MS[name] / 1e3) for name in COMPUTE_MS}
    result = {
        "fit": fits,
        "assumed": {"net_latency_s": NET_LATENCY_S, "gpus_per_node": GPUS_PER_NODE, "node_gbps": NODE_GBPS}
        | {"compute_ms_batch64": COMPUTE_MS},
        "parameters": sizes,
        "predicted": predictions,
    }
    write_json(args.out, result)
    for name, by_link in predictions.items():
        for link, rows in by_link.items():
            cells = " ".join(
                f"{r['workers']}:{r['ring_efficiency']:.2f}/{r['two_level_efficiency']:.2f}" for r in rows
            )
            print(f"{name:12s} {link:8s} ring/two-level {cells}")


if __name__ == "__main__":
    main()
