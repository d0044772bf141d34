"""A step's time across nodes, on paper, for node counts this machine cannot hold. Pure arithmetic.

``step(nodes) = compute + allreduce(nodes) + overhead``: compute is the unsynchronised copies' step at the
same node count; the all-reduce a two-level ring at the link's measured rate and latency; the overhead a
constant fitted at the smallest node count measured. For steps that sum after the backward pass; an upper
bound for those that overlap.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

#: The node counts the bench predicts beyond what it measured.
BEYOND = (16, 32, 64, 128, 256, 512, 1024)


@dataclass(frozen=True)
class Link:
    """A node's link: its rate (Gbit/s, each way) and one message's latency (s)."""

    gbit_s: float
    latency_s: float


def allreduce_s(nodes: int, nbytes: float, link: Link, per_node: int = 1, node_gbit_s: float = 0.0) -> float:
    """Seconds an all-reduce of ``nbytes`` needs over ``nodes`` nodes of ``per_node`` workers each: inside a
    node a reduce-scatter and an all-gather on its bus (``node_gbit_s``), across nodes a ring (``2 (N - 1)
    / N`` of the bytes each way and ``2 (N - 1)`` latencies)."""
    inside = 0.0
    if per_node > 1 and node_gbit_s > 0:
        inside = 2 * (per_node - 1) / per_node * nbytes * 8 / (node_gbit_s * 1e9)
    if nodes < 2:
        return inside
    across = 2 * (nodes - 1) / nodes * nbytes * 8 / (link.gbit_s * 1e9) + 2 * (nodes - 1) * link.latency_s
    return inside + across


@dataclass(frozen=True)
class Fitted:
    """The per-step overhead fitted at one measured point (seconds), with that point."""

    overhead_s: float
    nodes: int
    nbytes: float
    link: Link


def fit(nodes: int, step_s: float, compute_s: float, nbytes: float, link: Link) -> Fitted:
    """The overhead that makes the model meet one measured step (never below 0: a step faster than compute
    + wire overlapped; the model is then an upper bound)."""
    return Fitted(max(0.0, step_s - compute_s - allreduce_s(nodes, nbytes, link)), nodes, nbytes, link)


def predict_step_s(fitted: Fitted, nodes: int, compute_s: float, link: Link | None = None) -> float:
    """The model's step at ``nodes`` nodes with ``compute_s`` of compute (the fitted link unless given)."""
    return compute_s + allreduce_s(nodes, fitted.nbytes, link or fitted.link) + fitted.overhead_s


def efficiency(step_s: float, compute_s: float) -> float:
    """Weak-scaling efficiency: a node's step alone over its step in the job."""
    return compute_s / step_s if step_s > 0 else 0.0


def size(row: Mapping[str, Any]) -> tuple[int, int]:
    """A bench row's (nodes, workers per node)."""
    return int(row.get("nodes", 1)), int(row["workers"])


def sums_after_backward(label: str) -> bool:
    """Whether a bench configuration sums its gradients after the backward pass, the model's case:
    TensorFlow's collectives and the MPI backend without buckets (``mpi-b0``, ``mpi-fp16-b0``)."""
    return label == "tf" or label.startswith("tf-") or (label.startswith("mpi") and label.endswith("-b0"))


def bench_predictions(rows: Sequence[dict[str, Any]], nbytes: float) -> dict[str, Any]:
    """For each backend the model is for, measured across a link beside its unsynchronised copies: the
    model fitted at the smallest count, its efficiency at :data:`BEYOND` nodes, and in each measured row
    (mutated) ``predicted_step_s`` and ``predicted_error``. ``nbytes``: what one step all-reduces."""
    alone = {size(r): r["step_time_median_s"] for r in rows if r["backend"] == "independent"}
    out: dict[str, Any] = {}
    backends = {r["backend"] for r in rows if r.get("nodes", 1) > 1 and sums_after_backward(r["backend"])}
    for backend in sorted(backends):
        measured = [r for r in rows if r["backend"] == backend and r.get("link") and size(r) in alone]
        mine = sorted(measured, key=lambda r: int(r["nodes"]))
        if not mine:
            continue
        first = mine[0]
        link = Link(float(first["link"]["gbit_s"]), float(first["link"]["rtt_ms"]) / 2e3)
        compute = alone[size(first)]
        fitted = fit(first["nodes"], first["step_time_median_s"], compute, nbytes, link)
        for row in mine:
            here = alone[size(row)]
            row_link = Link(float(row["link"]["gbit_s"]), float(row["link"]["rtt_ms"]) / 2e3)
            predicted = predict_step_s(fitted, row["nodes"], here, row_link)
            row["predicted_step_s"] = predicted
            row["predicted_error"] = predicted / row["step_time_median_s"] - 1
        out[backend] = {
            "fitted_at_nodes": fitted.nodes,
            "overhead_ms": fitted.overhead_s * 1e3,
            "link_gbit_s": link.gbit_s,
            "latency_ms": link.latency_s * 1e3,
            "mb_per_step": nbytes / 1e6,
            "compute_ms": compute * 1e3,
            "efficiency_beyond": {
                str(n): efficiency(predict_step_s(fitted, n, compute), compute) for n in BEYOND
            },
        }
    return out
