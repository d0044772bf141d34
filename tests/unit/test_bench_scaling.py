"""The scaling model (tfdist.bench.scaling): the all-reduce's terms, the overhead fitted at one measured point
and the bench rows it predicts."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from tfdist.bench.scaling import BEYOND, Link, allreduce_s, bench_predictions, efficiency, fit, predict_step_s


def test_a_ring_moves_2_n_minus_1_over_n_of_the_bytes_with_2_n_minus_1_latencies() -> None:
    link = Link(gbit_s=1.0, latency_s=0.0)
    assert allreduce_s(2, 4.8e6, link) == pytest.approx(0.0384)
    assert allreduce_s(4, 4.8e6, link) == pytest.approx(0.0576)
    assert allreduce_s(1024, 4.8e6, link) == pytest.approx(2 * 1023 / 1024 * 0.0384)
    assert allreduce_s(8, 0.0, Link(1.0, 1e-3)) == pytest.approx(0.014)  # latency-bound
    assert allreduce_s(1, 4.8e6, link) == 0.0


def test_two_levels_add_the_node_s_own_reduce_scatter_and_all_gather() -> None:
    link = Link(gbit_s=25.0, latency_s=0.0)
    alone = allreduce_s(128, 178e6, link)
    inside = 2 * 3 / 4 * 178e6 * 8 / 80e9  # 4 workers on an 80 Gbit/s bus
    assert allreduce_s(128, 178e6, link, per_node=4, node_gbit_s=80.0) == pytest.approx(alone + inside)


def test_the_overhead_fitted_at_one_point_gives_that_point_back() -> None:
    link = Link(1.0, 5e-6)
    fitted = fit(2, step_s=0.120, compute_s=0.055, nbytes=4.8e6, link=link)
    assert fitted.overhead_s == pytest.approx(0.120 - 0.055 - 0.0384 - 2 * 5e-6)
    assert predict_step_s(fitted, 2, 0.055) == pytest.approx(0.120)
    assert predict_step_s(fitted, 8, 0.055) > predict_step_s(fitted, 4, 0.055) > 0.120
    faster = fit(2, step_s=0.060, compute_s=0.055, nbytes=4.8e6, link=link)  # overlapped: never negative
    assert faster.overhead_s == 0.0
    assert efficiency(0.120, 0.055) == pytest.approx(0.055 / 0.120) and efficiency(0.0, 1.0) == 0.0


def row(backend: str, nodes: int, step: float, gbit: float = 1.0) -> dict[str, Any]:
    return {
        "name": f"{backend}-n{nodes}",
        "backend": backend,
        "nodes": nodes,
        "workers": 1,
        "step_time_median_s": step,
        "link": {"gbit_s": gbit, "rtt_ms": 0.02},
    }


def test_bench_rows_get_the_model_fitted_at_their_smallest_node_count() -> None:
    rows = [
        row("independent", 2, 0.050),
        row("independent", 4, 0.100),
        row("mpi-b0", 2, 0.100),
        row("mpi-b0", 4, 0.170),
        row("raw-tf", 2, 0.110),
        row("mpi-b0", 8, 0.300),  # no unsynchronised copies at 8 nodes: nothing to compare it with
        row("mpi-b2", 2, 0.080),  # buckets overlap the backward pass: not what the model is for
        row("tf", 2, 0.150),
    ]
    predictions = bench_predictions(rows, 4.8e6)
    assert set(predictions) == {"mpi-b0", "tf"}  # references and overlapping sums are not modelled
    assert "predicted_step_s" not in rows[6] and rows[7]["predicted_error"] == pytest.approx(0.0)
    fitted = predictions["mpi-b0"]
    assert fitted["fitted_at_nodes"] == 2
    assert fitted["overhead_ms"] == pytest.approx((0.100 - 0.050 - 0.0384 - 2e-5) * 1e3)
    assert rows[2]["predicted_error"] == pytest.approx(0.0)
    expected_4 = 0.100 + 0.0576 + 6 * 1e-5 + fitted["overhead_ms"] / 1e3
    assert rows[3]["predicted_step_s"] == pytest.approx(expected_4)
    assert rows[3]["predicted_error"] == pytest.approx(expected_4 / 0.170 - 1)
    assert "predicted_step_s" not in rows[5]
    beyond = fitted["efficiency_beyond"]
    assert list(beyond) == [str(n) for n in BEYOND]
    assert all(0 < beyond[str(a)] >= beyond[str(b)] for a, b in itertools.pairwise(BEYOND))


def test_nothing_to_fit_without_a_link_or_copies() -> None:
    assert bench_predictions([row("mpi-b0", 2, 0.1)], 4.8e6) == {}  # no copies to take compute from
    one_node = [{**row("independent", 1, 0.05), "link": None}, {**row("mpi", 1, 0.06), "link": None}]
    assert bench_predictions(one_node, 4.8e6) == {}
