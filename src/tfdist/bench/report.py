"""Benchmark output: results.json, results.csv, report.md, scaling.png and a rich table on the console."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tfdist import files
from tfdist.bench.breakdown import WAIT

CSV_COLUMNS = (
    *("name", "workers", "replicas", "backend", "repeats", "examples_per_sec", "step_time_median_s"),
    *("step_time_p90_s", "speedup", "efficiency", "time_to_first_step_s", "cpu_util", "gpu_util"),
    *("gpu_mem_mb", "vs_independent", "vs_raw_tf", "peak_rss_mb", "rss_vs_one_worker", "nodes", "link_text"),
    "load_1min",
)


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.0f}%"


def _times(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _load(row: dict[str, Any]) -> str:
    """The machine's 1-minute load average after the run (others' work shares the cores)."""
    return "-" if row.get("load_1min") is None else f"{row['load_1min']:.1f}"


def _rss(row: dict[str, Any]) -> str:
    if row.get("peak_rss_mb") is None:
        return "-"
    ratio = row.get("rss_vs_one_worker")
    return f"{row['peak_rss_mb']:,.0f} MB" + (f" ({ratio:.2f}x)" if ratio is not None else "")


def _cells(r: dict[str, Any]) -> list[str]:
    """A row's cells shared by the report and the console table, from examples/s to CPU."""
    return [
        f"{r['examples_per_sec']:,.0f}",
        f"{r['step_time_median_s'] * 1000:.1f} ms",
        f"{r['step_time_p90_s'] * 1000:.1f} ms",
        f"{r['speedup']:.2f}x",
        f"{r['efficiency']:.2f}",
        _times(r.get("vs_independent")),
        _times(r.get("vs_raw_tf")),
        f"{r['time_to_first_step_s']:.1f} s",
        _pct(r["cpu_util"]),
    ]


def csv_text(rows: Sequence[dict[str, Any]]) -> str:
    """The rows as CSV (one line per configuration)."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=CSV_COLUMNS, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow(row)
    return buffer.getvalue()


def markdown(payload: dict[str, Any]) -> str:
    """report.md: what was run, on what, the table, the warnings and the diagnosis."""
    s = payload["settings"]
    lines = [
        "# tfdist bench",
        "",
        f"Workload `{s['workload']}` on `{s['dataset']}`, batch {s['batch_size_per_replica']} per replica, "
        f"{s['steps']} measured steps after {s['warmup']} warm-up steps, {s['repeats']} repeat(s) with the "
        "configurations alternating. Step times are per-step means over blocks of "
        f"{s['log_every']} steps; examples/s cover the measured steps only.",
        "",
        f"Machine: {payload['machine']['cores']} CPU cores, {payload['machine']['gpus']} GPU(s). Threads per "
        f"worker: {s['threads']} intra-op and {s['threads']} inter-op (TF_NUM_INTRAOP_THREADS, "
        "TF_NUM_INTEROP_THREADS), the same in every configuration.",
        "",
        "| configuration | nodes | workers | replicas | backend | examples/s | step median | step p90 "
        "| speed-up | efficiency | vs independent | vs raw-tf | first step | CPU | peak RSS per process "
        "| link | load |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in payload["runs"]:
        cells = [r["name"], r.get("nodes", 1), r["workers"], r["replicas"], r["backend"], *_cells(r)]
        cells += [_rss(r), r.get("link_text", "-"), _load(r)]
        lines.append("| " + " | ".join(map(str, cells)) + " |")
    lines += [
        "",
        "`local`: one process, nothing synchronised across processes; every backend's line starts there.",
        "`independent`: N copies of the one-worker run at once, unsynchronised: the limit of this machine "
        "(every cost of N processes sharing it, no communication). `raw-tf`: TensorFlow's tutorial loop "
        "(`strategy.run` + `compute_average_loss`, loss reduced every step) under "
        "MultiWorkerMirroredStrategy. `keras-fit`: unmodified `model.fit` under MultiWorkerMirroredStrategy. "
        "`vs independent` / `vs raw-tf`: examples/s divided by theirs at the same size, from the same run.",
    ]
    if payload["skipped"]:
        lines += ["", "Not run:", *[f"- {x}" for x in payload["skipped"]]]
    if payload["warnings"]:
        lines += ["", "Warnings:", *[f"- {x}" for x in payload["warnings"]]]
    lines += _breakdown_lines(payload["runs"])
    lines += _prediction_lines(payload["runs"], payload.get("predictions", {}))
    link = payload.get("link")
    if link:
        lines += ["", "## Links between the nodes (one probe per pair, before the runs)", ""]
        lines += [f"- {x}" for x in link["diagnosis"]]
    diagnosis = payload.get("diagnosis")
    if diagnosis:
        lines += ["", f"## Diagnosis: {diagnosis['bottleneck']}-bound", ""]
        lines += [f"- {x}" for x in diagnosis["evidence"]]
        lines += ["", f"Recommendation: {diagnosis['recommendation']}"]
    lines += ["", "![speed-up](scaling.png)", ""]
    if payload.get("predictions"):
        lines += ["![the scaling model](scaling-model.png)", ""]
    return "\n".join(lines)


def _ms(parts: dict[str, float], key: str) -> str:
    return f"{parts[key]:.1f}" if key in parts else "-"


def _mb(parts: dict[str, float]) -> str:
    return f"{parts['mb_across_nodes']:.2f}" if "mb_across_nodes" in parts else "-"


def _breakdown_lines(rows: Sequence[dict[str, Any]]) -> list[str]:
    """The ``--timeline`` table: each configuration's step split into its parts (medians, ms), with the
    wire time at the measured link rate and how close the step came to its bounds."""
    timed = [r for r in rows if r.get("breakdown")]
    if not timed:
        return []
    lines = [
        "",
        "## Where the time goes (from the timelines, medians of every rank's measured steps, ms)",
        "",
        "| configuration | step | forward + backward | all-reduce left after it | of it, waiting for the "
        "slowest rank | update | MB across nodes | wire time | compute + wire bound | overlap bound |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in timed:
        p, b = r["breakdown"], r.get("bounds", {})
        reduce_ = _ms(p, "all-reduce") if "all-reduce" in p else _ms(p, "all-reduce + update") + " (+ update)"
        serial = f"{b['serial_bound']:.1f} ({b['vs_serial_bound']:.2f}x)" if b else "-"
        overlap = f"{b['overlap_bound']:.1f} ({b['vs_overlap_bound']:.2f}x)" if b else "-"
        lines.append(
            f"| {r['name']} | {_ms(p, 'step')} | {_ms(p, 'forward + backward')} | {reduce_} | "
            f"{_ms(p, WAIT)} | {_ms(p, 'update')} | {_mb(p)} | {_ms(b, 'wire')} | {serial} | "
            f"{overlap} |"
        )
    lines += [
        "",
        "Wire time: the least an all-reduce of those bytes needs at the link's measured rate (2 (n - 1) / n "
        "of them in and out of each node). Bounds: compute (the unsynchronised copies' forward + backward "
        "pass when they ran) + wire + update for a sum after the backward pass, max(compute, wire) + update "
        "for one that overlaps it; in brackets the bound over the step (1.00x: the wire's pace). Waiting "
        "for the slowest rank: how long, per step, the ranks' gradients waited on average for the last "
        "rank's backward pass to end (the ranks' clocks as they are): what only ranks that compute alike "
        "remove.",
    ]
    return lines


def _prediction_lines(rows: Sequence[dict[str, Any]], predictions: dict[str, Any]) -> list[str]:
    """The scaling model (:mod:`tfdist.bench.scaling`): fitted at the smallest node count, its step beside
    each measured one, and its efficiency at node counts beyond."""
    if not predictions:
        return []
    lines = [
        "",
        "## The scaling model: compute + all-reduce at the link's rate + a fitted overhead",
        "",
        "For the configurations that sum after the backward pass (TensorFlow's collectives, the MPI backend "
        "with `--bucket-mb 0`): an upper bound for those that overlap.",
        "",
        "| configuration | nodes | measured step | predicted step | error |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        if "predicted_step_s" in r:
            lines.append(
                f"| {r['name']} | {r['nodes']} | {r['step_time_median_s'] * 1e3:.1f} ms | "
                f"{r['predicted_step_s'] * 1e3:.1f} ms | {r['predicted_error']:+.0%} |"
            )
    counts = next(iter(predictions.values()))["efficiency_beyond"]
    lines += [
        "",
        "Beyond this machine (every node computing alone as fast as the smallest count's, on the same link): "
        "weak-scaling efficiency.",
        "",
        "| backend | fitted at | overhead per step | " + " | ".join(f"{n} nodes" for n in counts) + " |",
        "|---|---|---|" + "---|" * len(counts),
    ]
    for backend, p in predictions.items():
        cells = " | ".join(f"{p['efficiency_beyond'][n]:.2f}" for n in counts)
        lines.append(f"| {backend} | {p['fitted_at_nodes']} nodes | {p['overhead_ms']:.1f} ms | {cells} |")
    return lines


def plot(rows: Sequence[dict[str, Any]], path: Path) -> None:
    """Speed-up against workers, one line per backend (each starting from the local runs), and the ideal."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    local = [r for r in rows if r["backend"] == "local"]
    backends = sorted({r["backend"] for r in rows if r["backend"] != "local"}) or ["local"]
    replica_counts = sorted({r["replicas"] for r in rows})
    for backend in backends:
        for replicas in replica_counts:
            points = sorted(
                (r["workers"], r["speedup"])
                for r in [*local, *[r for r in rows if r["backend"] == backend]]
                if r["replicas"] == replicas
            )
            if points:
                label = backend if len(replica_counts) == 1 else f"{backend}, {replicas} replica(s)/worker"
                ax.plot(*zip(*points, strict=True), marker="o", label=label)
    workers = sorted({r["workers"] for r in rows})
    base = min(rows, key=lambda r: r["devices"])
    ax.plot(workers, [w / base["workers"] for w in workers], linestyle="--", color="grey", label="ideal")
    ax.set_xlabel("workers")
    ax.set_ylabel("speed-up (examples/s vs smallest)")
    ax.set_xticks(workers)
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    with files.atomic_path(path, suffix=".png") as tmp:
        fig.savefig(tmp, dpi=100)
    plt.close(fig)


def plot_model(rows: Sequence[dict[str, Any]], predictions: dict[str, Any], path: Path) -> None:
    """Efficiency against nodes: each backend's measured points (vs its unsynchronised copies) and the
    scaling model's line through the measured counts and beyond."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for backend, fitted in predictions.items():
        mine = [r for r in rows if r["backend"] == backend and r.get("vs_independent")]
        measured = sorted((r["nodes"], r["vs_independent"]) for r in mine)
        # Here the nodes share this machine's cores: the model with each count's own compute.
        here = sorted(
            (r["nodes"], r["step_time_median_s"] / r["predicted_step_s"] * r["vs_independent"])
            for r in mine
            if "predicted_step_s" in r
        )
        # Beyond: every node computing alone, as fast as at the count the model was fitted at.
        start = next((e for n, e in measured if n == fitted["fitted_at_nodes"]), None)
        beyond = [(int(n), e) for n, e in fitted["efficiency_beyond"].items()]
        if start is not None:
            beyond.insert(0, (fitted["fitted_at_nodes"], start))
        line = ax.plot(*zip(*measured, strict=True), marker="o", linestyle="", label=f"{backend}: measured")
        color = line[0].get_color()
        if here:
            ax.plot(*zip(*here, strict=True), linestyle="--", color=color, label=f"{backend}: model, here")
        ax.plot(
            *zip(*beyond, strict=True), linestyle=":", color=color, label=f"{backend}: model, nodes alone"
        )
    ax.set_xscale("log", base=2)
    ax.set_xlabel("nodes")
    ax.set_ylabel("efficiency (vs unsynchronised copies)")
    ax.set_ylim(0, 1.05)
    ax.legend(fontsize="small")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    with files.atomic_path(path, suffix=".png") as tmp:
        fig.savefig(tmp, dpi=100)
    plt.close(fig)


def write_all(out: Path, payload: dict[str, Any]) -> list[Path]:
    """Write the result files (each atomically; the scaling model's plot when it ran); their paths."""
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "results.json", out / "results.csv", out / "report.md", out / "scaling.png"]
    files.write_text(paths[0], json.dumps(payload, indent=2, default=float))
    files.write_text(paths[1], csv_text(payload["runs"]))
    files.write_text(paths[2], markdown(payload))
    plot(payload["runs"], paths[3])
    if payload.get("predictions"):
        paths.append(out / "scaling-model.png")
        plot_model(payload["runs"], payload["predictions"], paths[-1])
    return paths


def print_table(payload: dict[str, Any]) -> None:
    """The results as a rich table, then warnings and the diagnosis."""
    from rich.console import Console
    from rich.table import Table

    console = Console(width=170)
    table = Table(
        title=f"tfdist bench: {payload['settings']['workload']} on {payload['settings']['dataset']}"
    )
    table.add_column("config")
    for column in (
        *("examples/s", "step median", "step p90", "speed-up", "efficiency", "vs indep.", "vs raw-tf"),
        *("1st step", "CPU", "GPU", "peak RSS", "link"),
    ):
        table.add_column(column, justify="right")
    for r in payload["runs"]:
        table.add_row(r["name"], *_cells(r), _pct(r["gpu_util"]), _rss(r), r.get("link_text", "-"))
    console.print(table)
    for warning in payload["warnings"]:
        console.print(f"[yellow]warning:[/yellow] {warning}")
    for line in (payload.get("link") or {}).get("diagnosis", []):
        console.print(f"link: {line}")
    diagnosis = payload.get("diagnosis")
    if diagnosis:
        console.print(f"[bold]bottleneck: {diagnosis['bottleneck']}[/bold]")
        for line in diagnosis["evidence"]:
            console.print(f"  - {line}")
        console.print(f"  recommendation: {diagnosis['recommendation']}")
