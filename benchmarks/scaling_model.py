"""Beyond this machine, on paper: an alpha-beta model of each backend's all-reduce, fitted to measurements
here, combined with a step's compute time to predict weak-scaling efficiency for 2-256 workers.

1. Measures one sum-all-reduce of 4 KB-64 MB over 2 workers through each backend (`tfdist launch` +
   `python -m tfdist.bench.probes allreduce`) and fits t = 2*alpha + n*beta (a 2-rank ring): alpha is the
   backend's software latency per message (from the smallest size), beta its software cost per byte on this
   CPU (the slope between the two largest sizes: the gradients predicted for are larger than any cache).
2. Checks the model here: with the compute time and gradient size of mnist-cnn from a `tfdist bench` run
   (`--bench`), it predicts the 2-worker efficiency of each backend and sets it beside the measured one.
3. Predicts, for tfdist's MPI backend (all-reduce on the host: this machine's software alpha and beta plus
   the link's) and ResNet-50 and MobileNetV2 gradients (parameter counts from keras.applications), on
   10/25/100 Gb/s links, the efficiency of a flat ring over all workers and of the two-level scheme
   (reduce-scatter inside each node, ring across nodes, all-gather inside: what the MPI backend's
   NodeReducer, Horovod and NCCL do), with the step's compute time an input (ASSUMED, see --compute-ms).
4. Cross-checks against a published speed-up: MirroredStrategy on 1->4 GPUs of one node, ResNet-50,
   about 2.7x: the model's speed-up on a PCIe link (NCCL on the GPUs: link costs only), and the link
   bandwidth at which the model gives 2.7x.

    python benchmarks/scaling_model.py --bench benchmarks/results/bench/results.json
writes benchmarks/results/scaling_model.json and scaling_model.png.

Model (no overlap of communication with the backward pass, as in tfdist's one packed all-reduce per step):
    ring over p ranks:       T = 2(p-1)(a_sw + a_net) + 2(p-1)/p * n * (b_sw + b_net)   (b_node in one node)
    two-level, g per node:   T = 2(g-1)/g * n * (b_sw + b_node) + 2(N-1)(a_sw + a_net)
                                 + 2(N-1)/N * n * (b_net + b_sw/g),   N = p/g nodes
    efficiency = T_compute / (T_compute + T)
Software and link costs are added (no pipelining of copies with sends): a conservative choice.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))  # the shared _common.py
from _common import write_json

SIZES = (1024, 16384, 262144, 1048576, 4194304, 16777216)  # floats: 4 KB .. 64 MB
WORKERS = (2, 4, 8, 16, 32, 64, 128, 256)
LINKS_GBPS = (10, 25, 100)
NET_LATENCY_S = 10e-6  # ASSUMED per-message network latency (Ethernet/TCP order; InfiniBand is ~2 us)
GPUS_PER_NODE = 8  # the two-level scheme's ranks per node
NODE_GBPS = 800.0  # ASSUMED intra-node bandwidth for the two-level scheme (NVLink-class, 100 GB/s)
#: ASSUMED compute time of one training step at batch 64 per GPU, fp32, V100-class GPU (the order of
#: published single-GPU throughputs: ResNet-50 ~360 images/s, MobileNetV2 ~1,000 images/s).
COMPUTE_MS = {"ResNet-50": 178.0, "MobileNetV2": 64.0}
PUBLISHED = {"what": "MirroredStrategy, ResNet-50, 1 -> 4 GPUs of one node", "speedup": 2.7}
PCIE_GBPS = 96.0  # PCIe 3.0 x16, ~12 GB/s effective: the link of a 4-GPU node without NVLink


def measure(backend: str) -> list[dict[str, Any]]:
    """All-reduce times of every size in SIZES over 2 workers through ``backend``."""
    with tempfile.TemporaryDirectory() as tmp:
        result = os.path.join(tmp, "allreduce.json")
        cmd = [sys.executable, "-m", "tfdist", "launch", "-n", "2", "--cpu", "--quiet-workers"]
        cmd += ["--run-dir", os.path.join(tmp, "logs")] + (["--backend", "mpi"] if backend == "mpi" else [])
        cmd += ["-m", "tfdist.bench.probes", "allreduce", "--backend", backend]
        cmd += ["--floats", ",".join(map(str, SIZES)), "--iters", "20", "--out", result]
        env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "CUDA_VISIBLE_DEVICES": ""}
        env.update(TF_NUM_INTRAOP_THREADS="1", TF_NUM_INTEROP_THREADS="1", OMP_NUM_THREADS="1")
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env)
        if proc.returncode != 0:
            raise SystemExit(f"all-reduce probe ({backend}) failed:\n{proc.stderr[-3000:]}")
        return [
            {"bytes": s["bytes"], "median_s": s["median_s"]}
            for s in json.loads(Path(result).read_text())["sizes"]
        ]


def fit(points: list[dict[str, Any]]) -> dict[str, float]:
    """alpha, beta of t = 2*alpha + n*beta (a 2-rank ring): alpha from the smallest size (latency-bound),
    beta from the two largest (bandwidth-bound, past the caches: a least-squares line over all sizes is
    pulled off by the step between in-cache and out-of-cache sizes)."""
    n = np.array([p["bytes"] for p in points], float)
    t = np.array([p["median_s"] for p in points], float)
    beta = (t[-1] - t[-2]) / (n[-1] - n[-2])
    alpha = (t[0] - n[0] * beta) / 2
    predicted = 2 * alpha + n * beta
    return {
        "alpha_s": float(max(alpha, 0.0)),
        "beta_s_per_byte": float(beta),
        "predicted_ms_per_size": [float(x) * 1e3 for x in predicted],
        "measured_ms_per_size": [float(x) * 1e3 for x in t],
        "bytes": [int(x) for x in n],
    }


def ring(p: int, n: float, alpha: float, beta: float) -> float:
    """Ring all-reduce of n bytes over p ranks, every hop costing alpha + bytes * beta."""
    return 2 * (p - 1) * alpha + 2 * (p - 1) / p * n * beta


def flat_ring(p: int, g: int, n: float, alpha: float, beta: float, beta_node: float) -> float:
    """One ring over all p ranks, g per node, ordered by node: inside one node every hop is intra-node;
    across nodes each ring step waits for its network hop (alpha every step, the node's link carrying
    2(p-1)/p * n bytes)."""
    if p <= g:
        return ring(p, n, alpha, beta_node)
    return ring(p, n, alpha, beta)


def two_level(
    p: int, g: int, n: float, alpha: float, beta_net: float, beta_sw: float, beta_node: float
) -> float:
    """Reduce-scatter in each node of g ranks, ring across the p/g nodes, all-gather in the node.

    Across nodes, each of a node's g ranks all-reduces its n/g chunk at once: the node's link carries
    2(N-1)/N * n bytes in all, while each rank's software handles only its chunk.
    """
    g = min(g, p)
    nodes = max(p // g, 1)
    inside = 2 * (g - 1) / g * n * (beta_sw + beta_node)
    if nodes == 1:
        return inside
    return inside + 2 * (nodes - 1) * alpha + 2 * (nodes - 1) / nodes * n * (beta_net + beta_sw / g)


def predict(sw: dict[str, float], gradient_bytes: float, compute_s: float) -> dict[str, Any]:
    """Efficiency for every link speed, worker count and scheme."""
    out: dict[str, Any] = {}
    for gbps in LINKS_GBPS:
        alpha = sw["alpha_s"] + NET_LATENCY_S
        beta_sw, beta_net, beta_link_node = sw["beta_s_per_byte"], 8 / (gbps * 1e9), 8 / (NODE_GBPS * 1e9)
        beta, beta_node = beta_sw + beta_net, beta_sw + beta_link_node
        rows = []
        for p in WORKERS:
            t_ring = flat_ring(p, GPUS_PER_NODE, gradient_bytes, alpha, beta, beta_node)
            t_two = two_level(p, GPUS_PER_NODE, gradient_bytes, alpha, beta_net, beta_sw, beta_link_node)
            rows.append(
                {
                    "workers": p,
                    "ring_allreduce_ms": t_ring * 1e3,
                    "ring_efficiency": compute_s / (compute_s + t_ring),
                    "two_level_allreduce_ms": t_two * 1e3,
                    "two_level_efficiency": compute_s / (compute_s + t_two),
                }
            )
        out[f"{gbps}Gbps"] = rows
    return out


def cross_check(sw: dict[str, float], gradient_bytes: float, compute_s: float) -> dict[str, Any]:
    """The model's 1->4 GPU speed-up on a PCIe link, and the bandwidth that reproduces the published one."""

    del sw  # MirroredStrategy on GPUs all-reduces with NCCL on the devices: link costs only, no host copies

    def speedup(gbps: float) -> float:
        t = ring(4, gradient_bytes, NET_LATENCY_S, 8 / (gbps * 1e9))
        return 4 * compute_s / (compute_s + t)

    low, high = 0.1, 10_000.0
    for _ in range(100):  # bisection on log scale: speed-up rises with bandwidth
        mid = (low * high) ** 0.5
        low, high = (mid, high) if speedup(mid) < PUBLISHED["speedup"] else (low, mid)
    return {
        **PUBLISHED,
        "model_speedup_pcie3": speedup(PCIE_GBPS),
        "pcie3_gbps": PCIE_GBPS,
        "bandwidth_for_published_gbps": low,
    }


def model_sizes() -> dict[str, int]:
    """Trainable parameters of ResNet-50 and MobileNetV2 (keras.applications, no weights downloaded)."""
    import keras

    nets = {"ResNet-50": keras.applications.ResNet50, "MobileNetV2": keras.applications.MobileNetV2}
    sizes = {}
    for name, build in nets.items():
        model = build(weights=None)
        sizes[name] = int(sum(np.prod(v.shape) for v in model.trainable_weights))
    return sizes


def here(bench: dict[str, Any], params: int, fits: dict[str, dict[str, float]]) -> dict[str, Any]:
    """Predicted vs measured 2-worker efficiency (against the independent copies) on this machine."""
    runs = {r["name"]: r for r in bench["runs"]}
    local = runs["local-w1-r1"]
    compute_s = local["step_time_median_s"]
    limit = runs.get("independent-w2-r1")
    out: dict[str, Any] = {"compute_ms": compute_s * 1e3, "gradient_bytes": params * 4}
    for backend, sw in fits.items():
        # Inside the measured range: interpolate the measurements (the fit is for extrapolation).
        t = float(np.interp(params * 4, sw["bytes"], np.array(sw["measured_ms_per_size"]) / 1e3))
        run = runs.get(f"{backend}-w2-r1")
        out[backend] = {
            "allreduce_ms": t * 1e3,
            "predicted_efficiency": compute_s / (compute_s + t),
            "measured_vs_independent": run.get("vs_independent") if run else None,
            "measured_efficiency": run["efficiency"] if run else None,
        }
    out["independent_efficiency"] = limit["efficiency"] if limit else None
    return out


def plot(predictions: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for ax, (name, by_link) in zip(axes, predictions.items(), strict=True):
        for i, (link, rows) in enumerate(by_link.items()):
            workers = [r["workers"] for r in rows]
            color = f"C{i}"
            ax.plot(
                workers, [r["ring_efficiency"] for r in rows], "-o", color=color, label=f"{link} flat ring"
            )
            ax.plot(
                workers,
                [r["two_level_efficiency"] for r in rows],
                "--s",
                color=color,
                label=f"{link} two-level",
            )
        ax.set_xscale("log", base=2)
        ax.set_title(f"{name} (predicted, MPI backend costs)")
        ax.set_xlabel(f"workers (GPUs, {GPUS_PER_NODE} per node)")
        ax.set_ylim(0, 1.05)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("weak-scaling efficiency")
    axes[1].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bench", default="benchmarks/results/bench/results.json", help="a tfdist bench run")
    parser.add_argument("--out", default="benchmarks/results/scaling_model.json")
    args = parser.parse_args()
    bench = json.loads(Path(args.bench).read_text())
    local_run = Path(args.bench).parent / "runs" / "local-w1-r1-0" / "bench.json"
    params = int(json.loads(local_run.read_text())["params"])
    measured = {b: measure(b) for b in ("tf", "mpi")}
    fits = {b: fit(points) for b, points in measured.items()}
    sizes = model_sizes()
    predictions = {
        name: predict(fits["mpi"], sizes[name] * 4, COMPUTE_MS[name] / 1e3)
        for name in ("ResNet-50", "MobileNetV2")
    }
    result = {
        "measured_allreduce_2_workers": measured,
        "fit": fits,
        "this_machine": here(bench, params, fits),
        "assumed": {
            "net_latency_s": NET_LATENCY_S,
            "gpus_per_node": GPUS_PER_NODE,
            "node_gbps": NODE_GBPS,
            "compute_ms_batch64": COMPUTE_MS,
        },
        "parameters": sizes,
        "predicted": predictions,
        "cross_check": cross_check(fits["mpi"], sizes["ResNet-50"] * 4, COMPUTE_MS["ResNet-50"] / 1e3),
    }
    out = Path(args.out)
    write_json(out, result)
    plot(predictions, out.with_suffix(".png"))
    print(json.dumps({k: result[k] for k in ("fit", "this_machine", "cross_check")}, indent=2))
    for name, by_link in predictions.items():
        for link, rows in by_link.items():
            cells = " ".join(
                f"{r['workers']}:{r['ring_efficiency']:.2f}/{r['two_level_efficiency']:.2f}" for r in rows
            )
            print(f"{name:12s} {link:8s} ring/two-level {cells}")


if __name__ == "__main__":
    main()
