"""A step's time across nodes, on paper: the all-reduce's wire and latency terms plus a per-step overhead
fitted to a measured run, for node counts this machine cannot hold. Pure arithmetic.

The model (a synchronous step whose gradient sum follows the backward pass, the MPI backend's unbucketed
step, and an upper bound for one that overlaps):

    step(nodes) = compute + allreduce(nodes) + overhead

- ``compute``: a node's forward and backward pass alone (measured: the unsynchronised copies' step at the
  same node count, which on a real cluster does not grow with the nodes);
- ``allreduce``: what moving the gradient needs at the link's rate and latency: a ring over the nodes
  (``2 (N - 1) / N`` of the bytes in and out of each node, ``2 (N - 1)`` latencies), after a reduce-scatter
  inside each node of several workers and before the all-gather there (the two-level scheme of Horovod,
  NCCL and the MPI backend's shared-memory level);
- ``overhead``: what the run spent beyond both (software: packing, polling, the TCP stack's copies),
  fitted as one constant per step at the smallest node count measured.

Fitted on two test hosts, it is checked against the measured 4 and 8 (``tfdist bench --nodes 2,4,8``), then
extrapolated with the compute of the smallest count.
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
    """Seconds an all-reduce of ``nbytes`` needs over ``nodes`` nodes of ``per_node`` workers each.

    Inside a node (``per_node`` > 1, ``node_gbit_s`` its bus): a reduce-scatter and an all-gather, each
    moving ``(g - 1) / g`` of the bytes. Across nodes: a ring of the node's share, every node's link carrying
    ``2 (N - 1) / N`` of the bytes each way, with ``2 (N - 1)`` latencies.

    Input/Output: ``allreduce_s(2, 4.8e6, Link(1.0, 0))`` -> ``0.0384``
    """
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
    """Whether a bench configuration sums its gradients after the backward pass, the case the model is
    for: TensorFlow's collectives (inside the update) and the MPI backend without buckets (``mpi-b0``,
    ``mpi-fp16-b0``); not the MPI backend's default buckets across nodes, not the references."""
    return label == "tf" or label.startswith("tf-") or (label.startswith("mpi") and label.endswith("-b0"))


def bench_predictions(rows: Sequence[dict[str, Any]], nbytes: float) -> dict[str, Any]:
    """For each backend that sums after the backward pass (:func:`sums_after_backward`), measured across a
    link beside its unsynchronised copies:
    the model fitted at the smallest count, its step at every measured count (``rows`` get
    ``predicted_step_s`` and ``predicted_error``: predicted / measured - 1) and its efficiency at
    :data:`BEYOND` nodes with the smallest count's compute. ``{}`` when nothing can be fitted.

    ``rows``: the bench's summary rows (``backend``, ``nodes``, ``workers``, ``step_time_median_s``,
    ``link``), mutated; ``nbytes``: what one step all-reduces (the gradient).
    """
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
