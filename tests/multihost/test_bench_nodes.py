"""`tfdist bench --hosts` across test hosts (network namespaces, each its own address and link): the grid runs
one `tfdist launch` per host, the report names the link beside each figure, and a host whose link is capped
lower than the others' is named in the diagnosis.

On the run's test hosts (``testhosts``: the tests' own prefix, not a benchmark's).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from hostcluster import HOSTS_SCRIPT, Cluster, Hosts, clean_env

from helpers.cli import TFDIST, tfdist


@pytest.fixture
def slow_node3(testhosts: Hosts) -> Iterator[Hosts]:
    """The run's test hosts, node3's link capped at 200 Mbit/s (the slow host) until the test ends."""
    testhosts.hosts_script("cap", "node3", "200mbit", check=True)
    try:
        yield testhosts
    finally:
        testhosts.hosts_script("cap", "node3", "off", check=True)


@pytest.mark.slow
def test_bench_across_two_hosts_names_the_link_and_the_slow_host(slow_node3: Hosts, tmp_path: Path) -> None:
    out = tmp_path / "bench"
    nodes = (
        "--hosts",
        "node1,node2,node3",
        "--nodes",
        "1,2",
        "--on-host",
        f"{HOSTS_SCRIPT} exec {{host}} --",
    )
    short = ("--steps", "10", "--warmup", "2", "--repeats", "1", "--compare", "independent")
    proc = tfdist(
        "bench",
        *nodes,
        "--workload",
        "regression",
        "--out",
        str(out),
        *short,
        base_env=clean_env(),
        timeout=800,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    payload = json.loads((out / "results.json").read_text())
    runs = {r["name"]: r for r in payload["runs"]}
    assert set(runs) == {"local-w1-r1", "tf-n2-w2-r1", "independent-n2-w2-r1"}
    # Each node's launcher formed one job of two nodes, one worker on each.
    logs = [(out / "logs" / f"tf-n2-w2-r1-0-node{i}.log").read_text() for i in (0, 1)]
    assert all("all workers finished" in log for log in logs)
    assert runs["tf-n2-w2-r1"]["vs_independent"] > 0 and runs["local-w1-r1"]["link"] is None
    link = runs["tf-n2-w2-r1"]["link"]
    assert link["interfaces"] == ["eth0"] and link["slowest_pair"] == ["node1", "node2"]
    assert link["gbit_s"] > 1.0 and link["rtt_ms"] > 0  # node1-node2 is uncapped
    probes = {(p["a"], p["b"]): p for p in payload["link"]["probes"]}
    assert set(probes) == {("node1", "node2"), ("node1", "node3"), ("node2", "node3")}
    assert probes[("node1", "node3")]["gbit_s"] < 0.25  # capped at 200 Mbit/s
    report = (out / "report.md").read_text()
    assert "| tf-n2-w2-r1 | 2 | 2 |" in report and "eth0 " in report
    assert "slow node: node3" in report and "slow node: node3" in proc.stdout


@pytest.mark.slow
def test_bench_inside_a_slurm_allocation(cluster: Cluster, tmp_path: Path) -> None:
    """`salloc -N 2 tfdist bench --nodes 1,2`: the allocation's nodes, each reached through srun."""
    out = tmp_path / "bench"
    short = ("--steps", "10", "--warmup", "2", "--repeats", "1", "--compare", "independent")
    proc = cluster.on(
        "node1",
        "salloc", "-N", "2", "--time", "10",
        *TFDIST, "bench", "--nodes", "1,2", "--workload", "regression",
        "--out", str(out), *short,
        timeout=800,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    payload = json.loads((out / "results.json").read_text())
    assert payload["settings"]["hosts"] == ["node1", "node2"] and "srun" in payload["settings"]["on_host"]
    runs = {r["name"]: r for r in payload["runs"]}
    assert set(runs) == {"local-w1-r1", "tf-n2-w2-r1", "independent-n2-w2-r1"}
    assert runs["tf-n2-w2-r1"]["link"]["interfaces"] == ["eth0"]
