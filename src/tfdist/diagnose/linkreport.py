"""Pure reading of the link probes: which pairs to probe, the link each node count runs on, the slow node.

Input/Output: ``probe_pairs(("n1", "n2", "n3"))`` -> ``[("n1", "n2"), ("n1", "n3"), ("n2", "n3")]``;
``slow_node([{"a": "n1", "b": "n2", "gbit_s": 8}, {"a": "n1", "b": "n3", "gbit_s": 0.9},
{"a": "n2", "b": "n3", "gbit_s": 0.9}])`` -> ``("n3", 0.9, 8)``: every link of n3 is slow, not the others'.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

#: A node whose best link reaches less than this share of every other node's best link is named slow.
SLOW_SHARE = 0.7


def probe_pairs(hosts: Sequence[str]) -> list[tuple[str, str]]:
    """Every pair of nodes once, in node order (3 nodes: 3 probes; the first measures, the second serves)."""
    return list(itertools.combinations(hosts, 2))


def link_of(probes: Sequence[Mapping[str, Any]], hosts: Sequence[str]) -> dict[str, Any] | None:
    """The link a job on ``hosts`` runs on: its slowest pair's bandwidth and latency (a synchronised step
    waits for its slowest link), with the interfaces seen; None on one node."""
    inside = [p for p in probes if p["a"] in hosts and p["b"] in hosts]
    if len(hosts) < 2 or not inside:
        return None
    slowest = min(inside, key=lambda p: p["gbit_s"])
    interfaces = sorted({p["interface_a"] for p in inside} | {p["interface_b"] for p in inside})
    speeds = sorted({p["speed_mbit"] for p in inside if p.get("speed_mbit")})
    return {
        "interfaces": interfaces,
        "reported_speed_mbit": speeds,
        "gbit_s": slowest["gbit_s"],
        "rtt_ms": max(p["rtt_ms"] for p in inside),
        "slowest_pair": [slowest["a"], slowest["b"]],
    }


def describe(link: Mapping[str, Any] | None) -> str:
    """One short cell: ``eth0 7.9 Gbit/s, RTT 0.06 ms`` (``-`` on one node)."""
    if not link:
        return "-"
    return f"{'/'.join(link['interfaces'])} {link['gbit_s']:.2f} Gbit/s, RTT {link['rtt_ms']:.2f} ms"


def slow_node(probes: Sequence[Mapping[str, Any]]) -> tuple[str, float, float] | None:
    """(node, its best bandwidth, the lowest best bandwidth of the others) when one node's links are all
    much slower than every other node's best; None when no node stands out (or with two nodes, where one
    probe cannot tell which end is slow)."""
    best: dict[str, float] = {}
    for p in probes:
        for node in (p["a"], p["b"]):
            best[node] = max(best.get(node, 0.0), float(p["gbit_s"]))
    if len(best) < 3:
        return None
    node = min(best, key=lambda n: best[n])
    others = min(v for n, v in best.items() if n != node)
    return (node, best[node], others) if best[node] < SLOW_SHARE * others else None


def diagnosis(probes: Sequence[Mapping[str, Any]]) -> list[str]:
    """What the probes say about the nodes' links, in sentences for the report."""
    if not probes:
        return []
    lines = [
        f"{p['a']} -> {p['b']}: {p['gbit_s']:.2f} Gbit/s, round trip {p['rtt_ms']:.2f} ms "
        f"({p['interface_a']} -> {p['interface_b']})"
        for p in probes
    ]
    slow = slow_node(probes)
    if slow:
        node, rate, others = slow
        lines.append(
            f"slow node: {node} — its links reach at most {rate:.2f} Gbit/s while every other node reaches "
            f"{others:.2f} Gbit/s or more; every synchronised step across it waits for its link. Hint: check "
            f"{node}'s network interface (speed, cabling, a rate limit) or leave it out of the job."
        )
    elif len(probes) == 1 and len({p["gbit_s"] for p in probes}) == 1:
        p = probes[0]
        lines.append(
            f"one pair ({p['a']}, {p['b']}): a slow end cannot be told apart with two nodes; measure with a "
            "third node to name it."
        )
    return lines
