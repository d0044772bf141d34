"""The benchmark tables of docs/guides/benchmarking.md (markdown), from the committed results, so the page
quotes the JSON.

python devtools/doc_tables.py   # print them (bench/results.json, scaling_model.json, bench-nodes/)
python docs/hooks.py --write      # rewrite them, and the other generated blocks, in the docs sources
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent.parent / "benchmarks" / "results"
SHOWN_WORKERS = (2, 8, 16, 64, 256)


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def bench_table(payload: dict) -> str:
    """One row per configuration of a `tfdist bench --compare all` run."""
    lines = [
        "| configuration | examples/s (median; each repeat) | step median / p90 | efficiency "
        "| vs independent | vs raw-tf | peak RSS per process |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in payload["runs"]:
        each = ", ".join(f"{v:,.0f}" for v in r["examples_per_sec_all"])
        rss = (
            "-" if r["peak_rss_mb"] is None else f"{r['peak_rss_mb']:,.0f} MB ({r['rss_vs_one_worker']:.2f}x)"
        )
        lines.append(
            f"| `{r['name']}` | {r['examples_per_sec']:,.0f} ({each}) | "
            f"{r['step_time_median_s'] * 1e3:.1f} / {r['step_time_p90_s'] * 1e3:.1f} ms | "
            f"{r['efficiency']:.2f} | {_x(r['vs_independent'])} | {_x(r['vs_raw_tf'])} | {rss} |"
        )
    return "\n".join(lines)


def model_table(model: dict) -> str:
    """Predicted efficiency, flat ring / two-level, per model and link speed, at a few worker counts."""
    head = " | ".join(str(w) for w in SHOWN_WORKERS)
    lines = [f"| model | link | {head} |", "|---|---|" + "---|" * len(SHOWN_WORKERS)]
    for name, by_link in model["predicted"].items():
        for link, rows in by_link.items():
            by_workers = {r["workers"]: r for r in rows}
            cells = " | ".join(
                f"{by_workers[w]['ring_efficiency']:.2f} / {by_workers[w]['two_level_efficiency']:.2f}"
                for w in SHOWN_WORKERS
            )
            lines.append(f"| {name} | {link.replace('Gbps', ' Gb/s')} | {cells} |")
    return "\n".join(lines)


def nodes_table(root: Path) -> str:
    """`tfdist bench` across 2 test hosts, one row per configuration and link rate, the link measured."""
    summary = json.loads((root / "summary.json").read_text())
    lines = [
        "| link (set) | link (measured) | configuration | examples/s (median; each repeat) | step median "
        "| vs independent | vs raw-tf | load (1 min) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for rate in summary["links"]:
        payload = json.loads((root / rate / "bench" / "results.json").read_text())
        for r in payload["runs"]:
            each = ", ".join(f"{v:,.0f}" for v in r["examples_per_sec_all"])
            load = "-" if r.get("load_1min") is None else f"{r['load_1min']:.1f}"
            lines.append(
                f"| {rate} | {r.get('link_text', '-')} | `{r['name']}` | "
                f"{r['examples_per_sec']:,.0f} ({each}) | "
                f"{r['step_time_median_s'] * 1e3:.0f} ms | {_x(r['vs_independent'])} | {_x(r['vs_raw_tf'])} "
                f"| {load} |"
            )
    return "\n".join(lines)


def check_table(check: dict) -> str:
    """The scaling model's prediction beside the measurement, per configuration and link rate."""
    lines = [
        "| link (set) | configuration | all-reduce fit: alpha, beta | all-reduce of 4.8 MB | compute "
        "| predicted vs independent | measured | error |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for rate, link in check["links"].items():
        for r in link["rows"]:
            f = link["fits"][r["allreduce_backend"]]
            lines.append(
                f"| {rate} | `{r['configuration']}` | {r['allreduce_backend']}: {f['alpha_ms']:.2f} ms, "
                f"{f['beta_ms_per_mb']:.2f} ms/MB | {r['allreduce_ms']:.1f} ms | {r['compute_ms']:.0f} ms | "
                f"{r['predicted_vs_independent']:.2f} | {r['measured_vs_independent']:.2f} | "
                f"{r['error']:+.0%} |"
            )
    return "\n".join(lines)


def _ratio(row: dict) -> str:
    """A configuration's ratio to ``independent``: the median of its repeats and their range."""
    each = row["vs_independent_per_repeat"]["each"]
    return f"{row['vs_independent_per_repeat']['median']:.2f}x ({min(each):.2f}-{max(each):.2f})"


def _link_runs(results: Path) -> dict[str, dict[str, Any]]:
    """The bench runs across two test hosts shown in the README, each link's rows by configuration: the
    5-repeat run of the wire variants, and the newest run of the default wire (when it is there)."""
    runs = {}
    for label, folder, names in (
        ("5 repeats", "overlap-nodes-5x", ("summary-1gbit.json", "summary-uncapped.json")),
        ("newest", "overlap-nodes-burst", ("summary.json",)),
    ):
        paths = [results / folder / name for name in names]
        if not all(path.exists() for path in paths):
            continue
        summaries = [json.loads(path.read_text()) for path in paths]
        runs[label] = {
            "commit": {
                rate: summary["started"]["commit"][:7] for summary in summaries for rate in summary["links"]
            },
            "links": {
                rate: link["mnist-cnn"] for summary in summaries for rate, link in summary["links"].items()
            },
        }
    return runs


def link_table(results: Path = RESULTS) -> str:
    """The README's table: each way of training across a capped and an uncapped link, as a fraction of
    two unsynchronised copies (``independent``), with the scaling model's prediction beside it; the newest
    run of the default wire in its own columns (the same grid at a later commit, on another day)."""
    runs = _link_runs(results)
    hvd = json.loads((results / "horovod-nodes.json").read_text())["links"]
    check = json.loads((results / "bench-nodes" / "scaling_check.json").read_text())["links"]
    rates = ("1gbit", "uncapped")
    columns = [(label, rate) for label in runs for rate in rates]
    header = [
        f"{'1 Gbit/s' if rate == '1gbit' else 'uncapped'} ({runs[label]['commit'].get(rate, '-')}, {label})"
        for label, rate in columns
    ]
    lines = [
        f"| against two unsynchronised copies (`independent`) | {' | '.join(header)} |",
        "|---|" + "---|" * len(columns),
    ]
    shown = {
        "MPI backend, 2 MB buckets (the default)": "mpi-b2-n2-w2-r1",
        "MPI backend, one sum after the backward pass": "mpi-b0-n2-w2-r1",
        "MPI backend, 2 MB buckets, fp16 wire": "mpi-fp16-b2-n2-w2-r1",
        "TensorFlow's tutorial loop (`raw-tf`)": "raw-tf-n2-w2-r1",
    }
    for label, name in shown.items():
        cells = []
        for run, rate in columns:
            by = runs[run]["links"].get(rate, {})
            cells.append(_ratio(by[name]) if name in by else "-")
        lines.append(f"| {label} | {' | '.join(cells)} |")
    cells = []
    for run, rate in columns:
        pair = [hvd.get(rate, {}).get(name) for name in ("hvd-b0", "hvd-b2")]
        shown_here = run == "5 repeats" and all(pair)
        cells.append(" -> ".join(f"{r['vs_independent_median']:.2f}x" for r in pair) if shown_here else "-")
    lines.append(
        f"| Horovod's `DistributedGradientTape` loop: one sum -> 2 MB buckets | {' | '.join(cells)} |"
    )
    cells = []
    for run, rate in columns:
        if run != "5 repeats":
            cells.append("-")
            continue
        row = next(r for r in check[rate]["rows"] if r["configuration"].startswith("mpi-"))
        predicted, measured = row["predicted_vs_independent"], row["measured_vs_independent"]
        cells.append(f"{predicted:.2f}x predicted, {measured:.2f}x measured")
    lines.append(f"| the scaling model, MPI backend (one sum) | {' | '.join(cells)} |")
    return "\n".join(lines)


def tables() -> dict[str, str]:
    """Each generated table of the benchmarking page by the name of its block."""
    out = {
        "bench": bench_table(json.loads((RESULTS / "bench" / "results.json").read_text())),
        "scaling-model": model_table(json.loads((RESULTS / "scaling_model.json").read_text())),
    }
    nodes = RESULTS / "bench-nodes"
    if (nodes / "summary.json").exists():
        out["bench-nodes"] = nodes_table(nodes)
    if (nodes / "scaling_check.json").exists():
        out["scaling-check"] = check_table(json.loads((nodes / "scaling_check.json").read_text()))
    if (RESULTS / "horovod-nodes.json").exists():
        out["link"] = link_table()
    return out


def main() -> None:
    print("\n\n".join(tables().values()))


if __name__ == "__main__":
    main()
