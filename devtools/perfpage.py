"""docs/performance.md, written from the committed results under ``benchmarks/results/`` (and README's
"How fast" lines, :func:`how_fast`, which docs/hooks.py writes as a generated block).

    python devtools/perfpage.py           # rewrite docs/performance.md
    python devtools/perfpage.py --check   # exit 1 when the committed page differs from what this writes

Every figure on the page comes from a JSON file, with the day it was measured, the machine and the
configuration in words. A new result is one entry in ``RESULTS``: its file, what was run, on what, and a
function that turns the file into a table (reuse one below when the file has the same shape).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tfdist.bench.breakdown import WAIT  # the breakdown key of the ranks' wait

ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = ROOT / "benchmarks" / "results"
PAGE = ROOT / "docs" / "performance.md"

#: The software every result ran on.
SOFTWARE = "TensorFlow 2.21, Keras 3, Python 3.11"
#: The machine most results were measured on, in words.
SMALL_VM = f"a 2-core virtual machine without a GPU ({SOFTWARE})"
#: Two hosts emulated on that machine: what "across a link" means below.
TWO_HOSTS = (
    "two hosts emulated on one 2-core virtual machine without a GPU, a network namespace and a core each, "
    f"joined by a virtual link left uncapped or capped at 1 Gbit/s ({SOFTWARE})"
)

Table = list[list[str]]


@dataclass(frozen=True)
class Result:
    """One measured result: one section of the page."""

    title: str
    #: The JSON file(s) under benchmarks/results/ the table is read from.
    sources: tuple[str, ...]
    #: What was run, in words a user knows (the workload, batch, repeats).
    setup: str
    machine: str
    #: How to measure it yourself.
    command: str
    #: (the JSON of every source, in order) -> header row + rows.
    table: Callable[[list[Any]], Table]
    #: The day of the run when the JSON does not record it (YYYY-MM-DD).
    date: str = ""
    #: One or two sentences on what the table says; figures only from the table above it.
    reading: str = ""


# ---- configuration names in words ---------------------------------------------------------------------

_CONFIG_WORDS = {
    "local": "1 worker",
    "tf": "TensorFlow collectives (`--backend tf`)",
    "mpi": "MPI backend (`--backend mpi`)",
    "independent": "2 unsynchronised copies: the machine's limit",
    "raw-tf": "TensorFlow's tutorial loop, without tfdist",
    "keras-fit": "unmodified `model.fit` (tfdist's Keras fix)",
    "mpi-b2": "MPI backend, 2 MB buckets (`--bucket-mb 2`)",
    "mpi-bauto": "MPI backend, buckets chosen from the first steps (`auto`, the default)",
    "mpi-b0": "MPI backend, one sum after the backward pass (`--bucket-mb 0`)",
    "mpi-fp16-b2": "MPI backend, 2 MB buckets, 16-bit wire (`--compression fp16`)",
    "mpi-fp16-b0": "MPI backend, one sum, 16-bit wire",
    "hvd-b0": "Horovod's `DistributedGradientTape`, one sum",
    "hvd-b2": "Horovod's `DistributedGradientTape`, 2 MB buckets",
    "fit-b2": "`tfdist.fit`, MPI backend, 2 MB buckets",
}


def config_words(name: str) -> str:
    """A configuration's name in words: ``mpi-w2-r1`` -> ``MPI backend (`--backend mpi`), 2 workers``."""
    parts = name.split("-")
    # The grid's suffixes (-n2 nodes, -w2 workers, -r1 replicas) say how many; the rest is the kind.
    kind = "-".join(p for p in parts if not (p[:1] in "nwr" and p[1:].isdigit()))
    workers = next((int(p[1:]) for p in parts if p[:1] == "w" and p[1:].isdigit()), 0)
    words = _CONFIG_WORDS.get(kind, f"`{name}`")
    if kind in ("local", "independent") or workers <= 1 or "-n" in name:
        return words
    return f"{words}, {workers} workers"


# ---- figures ------------------------------------------------------------------------------------------


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _rate(value: float) -> str:
    return f"{value:,.0f}"


def _range(each: list[float]) -> str:
    return f"{min(each):.2f}-{max(each):.2f}"


def bench_grid(payloads: list[Any]) -> Table:
    """A ``tfdist bench --compare`` run (results.json): one row per configuration."""
    runs = payloads[0]["runs"]
    has_memory = any(r.get("peak_rss_mb") for r in runs)
    head = [
        "configuration",
        "examples/s",
        "step time (median)",
        "against the limit",
        "against the tutorial loop",
    ]
    rows = [head + (["memory per process"] if has_memory else [])]
    for r in runs:
        row = [
            config_words(r["name"]),
            _rate(r["examples_per_sec"]),
            f"{r['step_time_median_s'] * 1e3:.0f} ms",
            _x(r.get("vs_independent")),
            _x(r.get("vs_raw_tf")),
        ]
        if has_memory:
            row.append("-" if r.get("peak_rss_mb") is None else f"{r['peak_rss_mb']:,.0f} MB")
        rows.append(row)
    return rows


def _link_label(rate: str) -> str:
    return "1 Gbit/s" if rate == "1gbit" else rate


def link_runs(payloads: list[Any]) -> Table:
    """Summaries of runs across two hosts: one row per configuration, a column per link."""
    links: dict[str, dict[str, Any]] = {}
    for summary in payloads:
        for rate, link in summary["links"].items():
            links[rate] = link["mnist-cnn"]
    rates = [r for r in ("1gbit", "uncapped") if r in links]
    names = list(dict.fromkeys(name for rate in rates for name in links[rate]))
    rows = [["configuration", *(f"{_link_label(r)}: against the limit (range)" for r in rates)]]
    for name in names:
        if name.startswith("independent"):
            continue
        cells = []
        for rate in rates:
            row = links[rate].get(name)
            each = row["vs_independent_per_repeat"]["each"] if row else None
            cells.append(
                f"{_x(row['vs_independent_per_repeat']['median'])} ({_range(each)})" if row else "not run"
            )
        rows.append([config_words(name), *cells])
    return rows


def horovod_link(payloads: list[Any]) -> Table:
    """horovod-nodes.json: Horovod's tape loop across two hosts, against the limit."""
    links = payloads[0]["links"]
    rates = [r for r in ("1gbit", "uncapped") if r in links]
    names = [n for n in links[rates[0]] if n != "independent"]
    rows = [["configuration", *(f"{_link_label(r)}: against the limit (range)" for r in rates)]]
    for name in names:
        cells = [
            f"{_x(links[r][name]['vs_independent_median'])} ({_range(links[r][name]['vs_independent_each'])})"
            for r in rates
        ]
        rows.append([config_words(name), *cells])
    return rows


def side_by_side(
    labels: dict[str, str], key: str = "median_examples_per_sec"
) -> Callable[[list[Any]], Table]:
    """Configurations run alternately in one benchmark: examples/s each, against the first."""

    def table(payloads: list[Any]) -> Table:
        medians = payloads[0][key]
        first = medians[next(iter(labels))]
        rows = [["configuration", "examples/s (median)", f"against {next(iter(labels.values()))}"]]
        for name, words in labels.items():
            rows.append([words, _rate(medians[name]), _x(medians[name] / first)])
        return rows

    return table


def wire_accuracy(payloads: list[Any]) -> Table:
    """compression_digits.json: what each wire ends with after the same training."""
    words = {
        "mpi exact": "exact (float32)",
        "mpi exact, 2 MB buckets": "exact, 2 MB buckets",
        "mpi fp16": "16-bit wire, fp16",
        "mpi bf16": "16-bit wire, bf16",
    }
    rows = [["wire (2 workers)", "training loss", "test accuracy", "largest weight difference from exact"]]
    for name, words_of in words.items():
        r = payloads[0]["runs"][name]
        rows.append(
            [
                words_of,
                f"{r['final_loss']:.4f}",
                f"{r['final_val_accuracy']:.4f}",
                f"{r['max_weight_diff_vs_mpi_exact']:.3f}",
            ]
        )
    return rows


def launch_time(payloads: list[Any]) -> Table:
    """launch_to_first_step.json: seconds from the command to the first finished training step."""
    p = payloads[0]
    return [
        ["how the script was started", "seconds to the first step (median)", "against a plain process"],
        ["`python train.py`, one process", f"{p['single_median_s']:.1f}", "1.00x"],
        ["`tfdist launch -n 2 --cpu train.py`", f"{p['launch_median_s']:.1f}", _x(p["ratio_median"])],
        ["`tfdist run -- python train.py`", f"{p['wrapper_median_s']:.1f}", _x(p["wrapper_ratio_median"])],
    ]


def allreduce(payloads: list[Any]) -> Table:
    """allreduce.json: one sum of a model's gradient over 2 workers, per backend."""
    p = payloads[0]
    words = {"tf": "TensorFlow collectives", "mpi": "MPI backend", "memcopy": "a copy in memory (for scale)"}
    rows = [["", "one sum of 4.8 MB (median)"]]
    rows += [[words[k], f"{v * 1e3:.2f} ms"] for k, v in p["median_s"].items()]
    return rows


def scaling_model(payloads: list[Any]) -> Table:
    """scaling_model.json: predicted weak-scaling efficiency, flat ring / two-level, by workers."""
    shown = (8, 16, 64, 256)
    rows = [["model", "link", *(f"{w} GPUs" for w in shown)]]
    for model, by_link in payloads[0]["predicted"].items():
        for link, points in by_link.items():
            at = {p["workers"]: p for p in points}
            cells = [f"{at[w]['ring_efficiency']:.2f} / {at[w]['two_level_efficiency']:.2f}" for w in shown]
            rows.append([model, link.replace("Gbps", " Gbit/s"), *cells])
    return rows


def rendezvous_scale(payloads: list[Any]) -> Table:
    """rendezvous_scale.json: forming time, server threads and memory against nodes."""
    rows = [["nodes (8 workers each)", "job formed in", "server threads", "server memory (RSS)"]]
    for r in payloads[0]["rows"]:
        rows.append(
            [f"{r['nodes']:,}", f"{r['forming_s']:.2f} s", str(r["threads"]), f"{r['rss_mib']:.0f} MiB"]
        )
    return rows


_PLANE_WORDS = {
    "slurm_nodelist": "Slurm node list and tasks per node, expanded",
    "slurm_task_env": "one srun task's environment (TF_CONFIG of every worker)",
    "sbatch_script": "the sbatch script",
    "launch_plan_node": "`--hosts`: one node's launch plan",
    "hostfile": "`--hostfile` read and checked",
    "mpi_plan": "the MPI launcher's host list",
    "k8s_jobset": "Kubernetes JobSet manifest",
    "k8s_pod_task_env": "one pod's environment",
    "mpich_dry_run": "MPICH's own dry run of that host list (wall time)",
}


def control_plane(payloads: list[Any]) -> Table:
    """control_plane_scale.json: milliseconds per step at 8 ... 1,024 nodes, and how each grows."""
    p = payloads[0]
    at = {r["nodes"]: r for r in p["rows"]}
    shown = [n for n in (8, 64, 256, 1024) if n in at]
    rows = [["step (N nodes x 4 workers)", *(f"{n:,} nodes" for n in shown), "growth (1: linear)"]]
    for key, words in _PLANE_WORDS.items():
        rows.append([words, *(f"{at[n][key]:.2f} ms" for n in shown), f"{p['growth'][key]:.2f}"])
    return rows


def launcher_threads(payloads: list[Any]) -> Table:
    """control_plane_scale_launcher.json: the launcher's threads and files with many local workers."""
    rows = [
        ["`tfdist launch -n W`", "threads", "open files", "memory (RSS)", "every line in logs and console"]
    ]
    for r in payloads[0]["rows"]:
        if r["tree"] != "this":
            continue
        whole = r["lines_on_console"] == r["lines_in_logs"] == r["lines_expected"]
        rows.append(
            [
                f"{r['workers']} workers",
                str(r["threads"]),
                str(r["open_files"]),
                f"{r['rss_mib']:.0f} MiB",
                "yes" if whole else "no",
            ]
        )
    return rows


def shard_memory(payloads: list[Any]) -> Table:
    """shard_optimizer.json: peak memory per rank during training, sharded (in one piece and in buckets)
    against unsharded."""
    rows = [
        [
            "ranks",
            "unsharded: peak per rank",
            "sharded (stage 1)",
            "saved (expected: Adam's slots x (1 - 1/N))",
            "sharded in buckets (stage 2)",
            "saved (expected: + gradients x (1 - 1/N))",
            "step time / unsharded: sharded, in buckets",
        ]
    ]
    for ranks, r in payloads[0]["by_ranks"].items():
        one, buckets = r["sharded"], r["sharded-buckets"]
        rows.append(
            [
                ranks,
                f"{r['unsharded']['train_peak_mib']:,.0f} MiB",
                f"{one['train_peak_mib']:,.0f} MiB",
                f"{one['train_peak_saved_mib']:,.0f} MiB ({one['expected_saved_mib']:,.0f})",
                f"{buckets['train_peak_mib']:,.0f} MiB",
                f"{buckets['train_peak_saved_mib']:,.0f} MiB ({buckets['expected_saved_mib']:,.0f})",
                ", ".join(_x(m["step_time_ratio_over_unsharded"]) for m in (one, buckets)),
            ]
        )
    return rows


def estimate_accuracy(payloads: list[Any]) -> Table:
    """estimate_accuracy.json: tfdist estimate against the measured peak of a real training process."""
    rows = [["model", "parameters", "optimizer", "estimate", "measured peak", "error"]]
    for r in payloads[0]["rows"]:
        rows.append(
            [
                r["model"],
                f"{r['params'] / 1e6:.1f} M",
                r["optimizer"],
                f"{r['estimate_mib']:,.0f} MiB",
                f"{r['measured_peak_mib']:,.0f} MiB",
                f"{r['error_percent']:+.0f} %",
            ]
        )
    return rows


def scaling_check(payloads: list[Any]) -> Table:
    """scaling-nodes/summary.json: the model fitted on 2 test hosts against the measured 4 and 8."""
    rows = [["link", "nodes", "measured step", "model's step", "error", "against the limit"]]
    for rate, link in payloads[0]["links"].items():
        for name, r in link["checked"].items():
            nodes = next(p[1:] for p in name.split("-") if p[:1] == "n" and p[1:].isdigit())
            rows.append(
                [
                    _link_label(rate),
                    nodes + (" (fitted here)" if nodes == "2" else ""),
                    f"{r['measured_step_ms']:.0f} ms",
                    f"{r['predicted_step_ms']:.0f} ms",
                    f"{r['error']:+.0%}",
                    _x(r["vs_independent"]),
                ]
            )
    return rows


def scaling_paper(payloads: list[Any]) -> Table:
    """scaling-nodes/summary.json: the model at the Horovod paper's 512 GPUs."""
    paper = payloads[0]["paper"]
    rows = [
        [
            "model",
            "gradient",
            "step's compute (assumed)",
            "all-reduce (model)",
            "efficiency, sum after the backward pass",
            "all of it hidden",
            "published",
            "share hidden the published figure implies",
        ]
    ]
    for name, r in paper.items():
        if name == "setting":
            continue
        rows.append(
            [
                name,
                f"{r['gradient_mb']:.0f} MB",
                f"{r['compute_ms']:.0f} ms",
                f"{r['allreduce_ms']:.0f} ms",
                f"{r['efficiency_no_overlap']:.2f}",
                f"{r['efficiency_full_overlap']:.2f}",
                f"{paper['setting']['published_efficiency']:.2f}",
                f"{r['implied_hidden_share']:.0%}",
            ]
        )
    return rows


def step_breakdown(payloads: list[Any]) -> Table:
    """link-breakdown/summary.json: each place's configurations, their step split into parts (ms), and
    across a link the wire time and how close the step came to its bounds."""
    summary = payloads[0]
    rows = [
        [
            "where",
            "configuration",
            "examples/s",
            "against the limit",
            "against the tutorial loop",
            "step",
            "forward + backward",
            "all-reduce left",
            "of it, waiting for the slowest rank",
            "wire time",
            "bound / step",
        ]
    ]
    for place, configs in summary["places"].items():
        for name, r in configs.items():
            left = r.get("all-reduce", r.get("all-reduce + update"))
            bound = "-"
            if "vs_serial_bound" in r:
                serial = "-b0" in name  # summed after the backward pass: compute + wire bounds it
                bound = f"{r['vs_serial_bound' if serial else 'vs_overlap_bound']:.2f}"
                bound += " (compute + wire)" if serial else " (max(compute, wire))"
            rows.append(
                [
                    place.replace("1gbit", "1 Gbit/s"),
                    config_words(name),
                    _rate(r["examples_per_sec"]),
                    _x(r.get("vs_independent")),
                    _x(r.get("vs_raw_tf")),
                    f"{r['step']:.0f} ms" if "step" in r else "-",
                    f"{r['forward + backward']:.0f} ms" if "forward + backward" in r else "-",
                    "-"
                    if left is None
                    else f"{left:.0f} ms" + ("" if "all-reduce" in r else " (with the update)"),
                    f"{r[WAIT]:.1f} ms" if WAIT in r else "-",
                    f"{r['wire']:.0f} ms" if "wire" in r else "-",
                    bound,
                ]
            )
    return rows


def compare_commits(payloads: list[Any]) -> Table:
    """compare_commits.json: each configuration's examples/s at the previous state and now, measured in
    turns on one day, the ratio repeat by repeat, and now against the limit and the tutorial loop."""
    report = payloads[0]
    base, head = report["median_examples_per_sec"]["base"], report["median_examples_per_sec"]["head"]
    rows = [
        [
            "where",
            "configuration",
            "examples/s, before",
            "examples/s, now",
            "now / before",
            "now against the limit",
            "now against the tutorial loop",
        ]
    ]
    for key, ratio in report["head_vs_base"].items():
        place, config = key.rsplit("/", 1)
        limit, loop = head.get(f"{place}/independent"), head.get(f"{place}/raw-tf")
        rows.append(
            [
                place.replace("1gbit", "1 Gbit/s"),
                _CONFIG_WORDS.get(config, f"`{config}`"),
                _rate(base[key]),
                _rate(head[key]),
                _x(ratio),
                _x(head[key] / limit) if limit else "-",
                _x(head[key] / loop) if loop else "-",
            ]
        )
    return rows


def how_fast(report: dict[str, Any]) -> str:
    """README's lines on speed, from compare_commits.json: the day, how fast it was, the ratios (the
    docs' generated block ``how-fast``, docs/hooks.py)."""
    head = report["median_examples_per_sec"]["head"]

    def ratio(place: str, config: str, against: str) -> str:
        return f"{head[f'{place}/{config}'] / head[f'{place}/{against}']:.2f}x"

    lines = [
        f"Measured {report['date'][:10]} on a 2-core CPU machine, where one unsynchronised mnist-cnn step "
        f"took {report['single_step_ms']:.0f} ms that day (a slower day lowers every ratio across a link). "
        "Every figure, with its setup: [Performance](docs/performance.md); to measure your own cluster: "
        "[Benchmarking](docs/guides/benchmarking.md).",
        "",
        "| where | MPI backend against the limit | against TensorFlow's tutorial loop "
        "| TF backend against the loop |",
        "|---|---|---|---|",
        f"| one host, 2 workers | {ratio('one host', 'mpi', 'independent')} | "
        f"{ratio('one host', 'mpi', 'raw-tf')} | {ratio('one host', 'tf', 'raw-tf')} |",
    ]
    for link, words in (("1gbit", "1 Gbit/s"), ("uncapped", "uncapped")):
        place = f"2 hosts {link}"
        if f"{place}/mpi" in head:
            lines.append(
                f"| two hosts, {words} link | {ratio(place, 'mpi', 'independent')} | "
                f"{ratio(place, 'mpi', 'raw-tf')} | - |"
            )
    return "\n".join(lines)


READING_COMPARE = (
    "A fast day: one unsynchronised copy's step took 48 ms. The references, whose code is the same in both "
    "states, moved 0.90-0.97x from one state's turn to the other's (the machine's drift that day); the MPI "
    "backend moved 1.01-1.04x and `model.fit` 1.02x: no regression. Across both links the MPI backend "
    "stays 1.27-1.38x the tutorial loop. On one host the TF backend is 0.98x the tutorial loop: the lead "
    "it showed on slower days (1.07x) is gone when a step computes in 48 ms."
)

# ---- the results shown, in page order ------------------------------------------------------------------

RESULTS: tuple[Result, ...] = (
    Result(
        title="Two workers on one machine",
        sources=("bench/results.json",),
        setup="mnist-cnn (1.2 million parameters) on synthetic data, batch 64 per worker, 1 thread per "
        "worker, 100 measured steps, the configurations alternated over 5 repeats; medians",
        machine=SMALL_VM,
        command="tfdist bench --workers 1,2 --backend tf,mpi --compare all --repeats 5 --diagnose",
        table=bench_grid,
        date="2026-11-23",
        reading="The limit is two copies of the job that never talk to each other. The MPI backend comes "
        "within a few percent of it; TensorFlow's own collectives spend CPU on threads the compute needs, "
        "which is why `tfdist train` picks the MPI backend on CPU when it can.",
    ),
    Result(
        title="Two workers, a large gradient and little compute",
        sources=("bench-big-gradient/results.json",),
        setup="the `big-gradient` workload (16 MB of gradient, about 12 ms of compute per step), synthetic "
        "data, batch 64 per worker, 40 measured steps, 3 repeats; medians",
        machine=SMALL_VM,
        command="tfdist bench --workload big-gradient --workers 1,2 --backend tf,mpi "
        "--compare independent,raw-tf --steps 40 --repeats 3",
        table=bench_grid,
        date="2026-11-23",
        reading="When communication dominates, the backend matters most: summing in shared memory (MPI) "
        "against TensorFlow's gRPC ring.",
    ),
    Result(
        title="Across a link: two hosts",
        sources=("overlap-nodes-5x/summary-1gbit.json", "overlap-nodes-5x/summary-uncapped.json"),
        setup="mnist-cnn on synthetic data, one worker per host, batch 64 per worker, 30 measured steps, "
        "5 repeats, each ratio taken against the same repeat's limit (2 unsynchronised copies)",
        machine=TWO_HOSTS,
        command="tfdist bench --hosts n1,n2 --on-host 'ssh {host}' --nodes 2 --backend mpi "
        "--bucket-mb 0,2 --compression none,fp16 --compare independent,raw-tf --repeats 5",
        table=link_runs,
        reading="On a slow link, summing the gradient in buckets while the backward pass goes on (the "
        "default) gains most; the 16-bit wire halved the bytes but not the time then (its NumPy "
        "conversions cost what the wire saved; mended since: see the 16-bit wire's section below).",
    ),
    Result(
        title="Across a link, a later run of the default wire",
        sources=("overlap-nodes-burst/summary.json",),
        setup="as above, 3 repeats, on a day the machine was slower (two unsynchronised copies ran at 1,434 "
        "examples/s against about 2,050 above), which alone raises every ratio to the limit; compare "
        "the rows with each other, not with the table above",
        machine=TWO_HOSTS,
        command="tfdist bench --hosts n1,n2 --on-host 'ssh {host}' --nodes 2 --backend mpi --bucket-mb 0,2 "
        "--compare independent,raw-tf --repeats 3",
        table=link_runs,
    ),
    Result(
        title="Horovod scripts across a link",
        sources=("horovod-nodes.json",),
        setup="a Horovod `DistributedGradientTape` loop (`import horovod.tensorflow as hvd`, answered by "
        "tfdist) and `tfdist.fit`, mnist-cnn on synthetic data, batch 64 per rank, one rank per host, "
        "40 steps, 3 repeats",
        machine=TWO_HOSTS,
        command="python benchmarks/horovod_nodes.py --links 1gbit,uncapped --repeats 3  # needs root",
        table=horovod_link,
        reading="A Horovod script runs as fast as `tfdist.fit` on the same link: both use the same "
        "buckets and wire.",
    ),
    Result(
        title="What a 16-bit wire costs in accuracy",
        sources=("compression_digits.json",),
        setup="`tfdist train`, mnist-cnn on the embedded digits data, 5 epochs, global batch 64, 2 workers "
        "on the MPI backend, each as its own node (so the gradients cross the wire)",
        machine=SMALL_VM,
        command="python devtools/compression_digits.py  # the four wires, one after another",
        table=wire_accuracy,
        date="2026-11-25",
        reading="Buckets change when a sum starts, not what is summed: the bucketed run's weights are "
        "bit-identical. The 16-bit wires round every gradient, and the weights drift a little.",
    ),
    Result(
        title="What tfdist adds to a training step",
        sources=("fit_overhead.json",),
        setup="mnist-cnn on synthetic data, batch 64, one device, 60 steps, 3 repeats alternated",
        machine=SMALL_VM,
        command="python benchmarks/fit_overhead.py --repeats 3 --steps 60",
        table=side_by_side(
            {
                "keras_model_fit": "Keras `model.fit`",
                "tfdist_fit": "`tfdist.fit`",
                "hand_loop": "a hand-written `strategy.run` loop",
            }
        ),
        date="2026-11-21",
    ),
    Result(
        title="`model.fit` with two workers",
        sources=("fit_multiworker.json",),
        setup="unmodified scripts under MultiWorkerMirroredStrategy, mnist-cnn, batch 64 per worker, "
        "2 workers through `tfdist launch`, 60 steps, 3 repeats",
        machine=SMALL_VM + ", on a slow day (one process took 170 ms a step against 56-73 ms on others)",
        command="tfdist bench --workers 2 --compare raw-tf,keras-fit --repeats 3 --steps 60",
        table=side_by_side(
            {
                "hand-loop": "TensorFlow's tutorial loop",
                "keras-fit": "Keras `model.fit` (tfdist's Keras fix)",
                "tfdist-fit": "`tfdist.fit`",
            }
        ),
        date="2026-11-23",
    ),
    Result(
        title="Horovod's API against `tfdist.fit`",
        sources=("horovod_tape.json",),
        setup="mnist-cnn on synthetic data, batch 64 per rank, 2 ranks on one machine, MPI backend, "
        "60 steps, 3 repeats",
        machine=SMALL_VM,
        command="python benchmarks/horovod_tape.py --repeats 3 --steps 60",
        table=side_by_side(
            {"tfdist-fit": "`tfdist.fit`", "hvd-tape": "a Horovod `DistributedGradientTape` loop"}
        ),
        date="2026-11-23",
    ),
    Result(
        title="Time to the first step",
        sources=("launch_to_first_step.json",),
        setup="a small Keras script, 5 repeats; most of the time is importing TensorFlow",
        machine=SMALL_VM,
        command="python benchmarks/launch_to_first_step.py --repeats 5",
        table=launch_time,
        date="2026-11-23",
    ),
    Result(
        title="One gradient sum",
        sources=("allreduce.json",),
        setup="one all-reduce of mnist-cnn's gradient (1.2 million float32 values) over 2 workers, 3 repeats",
        machine=SMALL_VM,
        command="python benchmarks/allreduce.py --repeats 3",
        table=allreduce,
        date="2026-11-21",
    ),
    Result(
        title="Beyond this machine (predicted, not measured)",
        sources=("scaling_model.json",),
        setup="weak-scaling efficiency of the MPI backend predicted from measured all-reduce costs, for "
        "ResNet-50 and MobileNetV2 at batch 64 per GPU, 8 GPUs per node, with an ASSUMED compute time of 178 "
        "and 64 ms per step (V100-class GPUs; no GPU was used); each cell: a flat ring / two levels (inside "
        "each node, then across nodes)",
        machine="none: a model of the all-reduce, its costs measured on " + SMALL_VM,
        command="python benchmarks/scaling_model.py",
        table=scaling_model,
        date="2026-11-23",
        reading="An upper bound: the model leaves out the input pipeline and per-step overheads.",
    ),
    Result(
        title="Where a step's time goes, on one machine and across a link",
        sources=("link-breakdown/summary.json",),
        setup="mnist-cnn on synthetic data, batch 64 per worker, one thread per worker, 40 measured steps, "
        "the configurations alternated over 3 repeats; the step's parts from `--timeline` (medians of "
        "every rank's steps). One host: 2 workers. Two hosts: one worker each, the MPI backend with one "
        "sum after the backward pass (`--bucket-mb 0`) and with 2 MB buckets (the default then), and the "
        "16-bit "
        "wire; wire time is the all-reduce's bytes at the link's measured rate; the bound is compute (the "
        "unsynchronised copies') + wire + update for one sum, max(compute, wire) + update for buckets",
        machine=SMALL_VM + "; two hosts emulated on it, links capped at 1 Gbit/s or uncapped",
        command="python benchmarks/link_breakdown.py --repeats 3  # needs root (test hosts)",
        table=step_breakdown,
        reading="A slow day: one unsynchronised copy's step took 116 ms (about 55 ms on a fast day), so "
        "the wire is a smaller share of each step than it would be then. One sum after the backward pass "
        "runs at the wire's pace (bound / step near 1). Buckets hide the wire at 1 Gbit/s, but the "
        "forward + backward pass grows by what moving the bytes through TCP costs the shared cores; on an "
        "uncapped link, where the wire takes 2 ms, they cost more than they hide. The 16-bit wire halves "
        "the bytes (and the wire time, 40 to 20 ms) but not the sum then: 46 to 40 ms. The next section "
        "found why and mended it.",
    ),
    Result(
        title="The 16-bit wire across a link: its sum's middle moved into the graph",
        sources=("wire-16bit/summary.json",),
        setup="mnist-cnn on synthetic data, batch 64 per worker, one thread per worker, two hosts with one "
        "worker each at 1 Gbit/s, 20 warm-up and 40 measured steps, the configurations alternated over 3 "
        "repeats, the gradient summed once after the backward pass (`--bucket-mb 0`) in float32 and through "
        "the 16-bit wire; before: the received slices widened, added and rounded by NumPy; now: by graph "
        "ops between the all-to-all and the all-gather; the two runs an hour apart on the same day",
        machine=SMALL_VM + "; two hosts emulated on it",
        command="python benchmarks/link_breakdown.py --no-one-host --links 1gbit --backends mpi --buckets 0 "
        "--compression none,fp16 --warmup 20 --repeats 3  # needs root (test hosts)",
        table=step_breakdown,
        reading="The 16-bit sum now takes 25 ms after the backward pass against 44 ms in float32, for a wire "
        "time of 20 against 40 ms: 1.26x the float32 sum's examples/s. Before, it took 42 ms, of which "
        "13.6 ms (timed inside the step) went to NumPy widening, adding and rounding this rank's 0.6M "
        "values: NumPy converts float16 one value at a time, slowly for subnormals, and a fifth of a summed "
        "gradient's values are float16 subnormals (a third more are zeros). TensorFlow's casts round to the "
        "same bits (tested on every 16-bit value and on random float32 bit patterns).",
    ),
    Result(
        title="Gradient buckets chosen from the first steps (`auto`)",
        sources=("auto-buckets/summary.json",),
        setup="mnist-cnn on synthetic data, batch 64 per worker, one thread per worker, two hosts with one "
        "worker each, 20 warm-up steps (auto decides at step 10) and 40 measured, the configurations "
        "alternated over 3 repeats: the MPI backend with one sum after the backward pass, with 2 MB "
        "buckets, and with `auto`, beside 2 unsynchronised copies and TensorFlow's tutorial loop",
        machine=SMALL_VM + "; two hosts emulated on it, links capped at 1 Gbit/s or uncapped",
        command="python benchmarks/link_breakdown.py --no-one-host --backends mpi --buckets 0,2,auto "
        "--warmup 20 --repeats 3 --out benchmarks/results/auto-buckets  # needs root (test hosts)",
        table=step_breakdown,
        reading="A fast day: one unsynchronised copy's step took 46 ms. At 1 Gbit/s the sum after the "
        "backward pass took 42 ms of an 89 ms step, so auto turned 2 MB buckets on: 1.40x the tutorial "
        "loop, against 1.19x with one sum and 1.36x with buckets given. On the uncapped link it kept one "
        "sum (its forward + backward pass stayed at one sum's 41-43 ms, not the buckets' 55): 0.85x the "
        "limit here, 0.92x for the same choice given as `--bucket-mb 0`, against 0.74x with buckets; the "
        "two one-sum rows differ by the run-to-run spread of this machine (0.81-0.94x in five runs of the "
        "day). Waiting for the slower rank is under 1 ms of the uncapped link's 7-8 ms sum: the rest is "
        "TCP moving 4.8 MB through the shared cores, where the wire itself needs 2 ms.",
    ),
    Result(
        title="This state against the previous one, the same day",
        sources=("compare_commits.json",),
        setup="the previous landed state and this one, each exported as committed and run in turns, 3 "
        "repeats: mnist-cnn on synthetic data, batch 64 per worker, one thread per worker, 20 warm-up and "
        "60 measured steps; one host with 2 workers (both backends, the limit, the tutorial loop, "
        "`model.fit`), and two hosts with one worker each at 1 Gbit/s and uncapped (the MPI backend with "
        "its default buckets, the limit, the tutorial loop); now / before is the median of the repeats' "
        "ratios",
        machine=SMALL_VM + "; two hosts emulated on it",
        command="python devtools/compare_commits.py --base PREVIOUS --repeats 3 --warmup 20  # needs root",
        table=compare_commits,
        reading=READING_COMPARE,
    ),
    Result(
        title="TensorFlow's collectives against the tutorial loop, on a fast day",
        sources=("tf-backend/summary.json",),
        setup="mnist-cnn on synthetic data, batch 64 per worker, one thread per worker, 2 workers on one "
        "host, 10 warm-up and 60 measured steps, the configurations alternated over 3 repeats; the step's "
        "parts from `--timeline`",
        machine=SMALL_VM,
        command="python benchmarks/link_breakdown.py --links '' --steps 60 --repeats 3 "
        "--out benchmarks/results/tf-backend",
        table=step_breakdown,
        reading="A fast day: one unsynchronised copy's step took 49 ms. The TF backend's forward + backward "
        "pass is no longer than the limit's; what it adds is the gradient all-reduce through TensorFlow's "
        "gRPC ring, about 15 ms beyond the limit's update, which TensorFlow's tutorial loop and `model.fit` "
        "pay alike: the three within 0.97-1.06x of each other, as in the run an hour earlier (1.00x). The "
        "tutorial loop's second all-reduce per step (its loss) is the only thing it does that the TF "
        "backend does not; on slower days it cost more, which was the TF backend's lead (1.07x on the "
        "116 ms day above). The MPI backend reached the limit here (0.93x in the earlier run): its 2.9 ms "
        "after the backward pass is 0.4 ms of waiting for the other rank and the rest copying the "
        "gradients into shared memory and summing them.",
    ),
    Result(
        title="The TF backend then and now: a lead the day made",
        sources=("tf-backend/compare_commits.json",),
        setup="the state whose TF backend once measured 1.40x the tutorial loop and this one, each "
        "exported as committed and run in turns, 3 repeats: mnist-cnn on synthetic data, 2 workers on one "
        "host, batch 64 per worker, one thread per worker, 60 measured steps; now / before is the median "
        "of the repeats' ratios",
        machine=SMALL_VM,
        command="python devtools/compare_commits.py --base STATE --links '' --repeats 3",
        table=compare_commits,
        reading="Measured side by side, the earlier state's TF backend ran at 1.01x the tutorial loop "
        "(1,731 against 1,706 examples/s), as this one does (1,471 against 1,460): the 1.40x of its own "
        "day was the day, not the code. Every TensorFlow-collectives configuration ran slower in this "
        "state's turns, the unchanged tutorial loop most (0.86x), the MPI backend and the limit 0.97-0.98x: "
        "a machine whose gRPC threads are this sensitive to the hour needs the ratios, not the rates.",
    ),
    Result(
        title="The scaling model, checked on eight hosts",
        sources=("scaling-nodes/summary.json",),
        setup="mnist-cnn on synthetic data, one worker per host, batch 64 per worker, the gradient summed "
        "after the backward pass (`--bucket-mb 0`), 20 measured steps; the model (compute + the all-reduce "
        "at the link's measured rate and latency + one per-step overhead) fitted at 2 hosts and predicting 4 "
        "and 8. Here the hosts share two cores, so compute grows with the hosts: the model takes each "
        "count's own (its unsynchronised copies')",
        machine="eight hosts emulated on "
        + SMALL_VM
        + " (a network namespace each, links capped at 1 Gbit/s "
        "or left uncapped)",
        command="python benchmarks/scaling_nodes.py --links 1gbit,uncapped  # needs root (test hosts)",
        table=scaling_check,
        reading="On a cluster, `tfdist bench --hosts n1,...,n8 --nodes 2,4,8 --backend mpi --bucket-mb 0 "
        "--compare independent` prints the same model beside its measured points and its efficiency at 16 "
        "to 1,024 nodes (report.md, scaling-model.png). Uncapped, the link is the hosts' "
        "shared CPU more than a wire, which the model does not know: its error there is the larger.",
    ),
    Result(
        title="The scaling model against a published figure",
        sources=("scaling-nodes/summary.json",),
        setup="Horovod's paper (Sergeev & Del Balso, 2018): 512 GPUs, 128 servers of 4 Pascal GPUs, "
        "25 Gbit/s RoCE, about 90 % scaling efficiency for ResNet-101 and Inception V3. The model's "
        "all-reduce: two levels (inside each server on an ASSUMED 80 Gbit/s bus, a ring across servers, "
        "5 us per message); the step's compute ASSUMED from the period's single-GPU throughputs (batch 64)",
        machine="none: the model",
        command="python benchmarks/scaling_nodes.py",
        table=scaling_paper,
        reading="Summing after the backward pass, the model gives 0.78 and 0.86; with the all-reduce hidden "
        "entirely, 1.00. The paper's 0.90 sits between: about 60 % (ResNet-101) and 35 % (Inception V3) of "
        "the all-reduce hidden behind the backward pass, which is what Horovod's tensor fusion during the "
        "backward pass does. The model bounds a job from both sides; where in between it lands is overlap.",
    ),
    Result(
        title="A rendezvous of a thousand nodes",
        sources=("rendezvous_scale.json",),
        setup="a job of N simulated nodes x 8 workers forming at one `tfdist launch --rdzv` server (the "
        "nodes are threads running tfdist's client), 3 repeats; medians",
        machine=SMALL_VM,
        command="python benchmarks/rendezvous_scale.py",
        table=rendezvous_scale,
        date="2026-11-26",
    ),
    Result(
        title="Launch plans and manifests at a thousand nodes",
        sources=("control_plane_scale.json",),
        setup="one call of each step for N nodes x 4 workers, the CPU time of the call (MPICH's dry run: "
        "wall time), 5 repeats; growth is the exponent between 512 and 1,024 nodes",
        machine=SMALL_VM,
        command="python benchmarks/control_plane_scale.py plan --repeats 5",
        table=control_plane,
        date="2026-11-26",
    ),
    Result(
        title="Many workers on one machine: the launcher",
        sources=("control_plane_scale_launcher.json",),
        setup="`tfdist launch -n W --cpu` of a script printing 20 lines 0.1 s apart (no TensorFlow); the "
        "launcher's peak threads, open files and memory, 3 repeats",
        machine=SMALL_VM,
        command="python benchmarks/control_plane_scale.py launcher --workers 8,32,64 --repeats 3",
        table=launcher_threads,
        date="2026-11-26",
    ),
    Result(
        title="Will it fit: the estimate against real processes",
        sources=("estimate_accuracy.json",),
        setup="`tfdist estimate` of each model against the peak memory (the process's own high-water mark, "
        "VmHWM) of one CPU process training it with `model.fit` for 4 steps",
        machine=SMALL_VM,
        command="python benchmarks/estimate_accuracy.py",
        table=estimate_accuracy,
        date="2026-11-26",
        reading="Every model within 20 %. Batch normalization costs a fixed ~8 MiB per layer on this "
        "backend (measured on stacks of 8 to 32 blocks), which the estimate now counts; convolutions and "
        "dense layers added nothing measurable beyond their weights, gradients, slots and activations.",
    ),
    Result(
        title="Sharding the optimizer (`shard_optimizer=True`)",
        sources=("shard_optimizer.json",),
        setup="a dense model of 100.7 million parameters with Adam, batch 8 per rank, the MPI backend, 5 "
        "steps, unsharded, sharded in one piece and sharded in 16 MB gradient buckets, alternated over 2 "
        "repeats; the highest memory of a rank during training",
        machine=SMALL_VM,
        command="python benchmarks/shard_optimizer.py --ranks 2,4 --repeats 2 --steps 5",
        table=shard_memory,
        date="2026-11-26",
        reading="Each rank keeps 1/N of Adam's two slots per weight; in buckets, a bucket's gradients are "
        "released once its reduce-scatter took them, which saved about the gradients' (1 - 1/N) more on 2 "
        "ranks (226 MiB against 192) and half of it on 4 (142 against 288), where the training peak falls "
        "below the set-up's (2,244 MiB: TensorFlow, the model and the first broadcast). On CPU the step "
        "time moves with the machine's load between repeats.",
    ),
)


# ---- the page -----------------------------------------------------------------------------------------

HEADER = """# Performance

What tfdist measured, and on what. Every table below is written by a script from the result files
committed with the project, so the page always says what the files say; each table says the day, the
machine and what ran. The machines are small (no GPU): read the ratios, not the examples per second.
To measure your own cluster, see [Benchmarking](guides/benchmarking.md).

**The limit** in these tables is the job's own copies run side by side without talking to each other
(`tfdist bench --compare independent`): what the machine gives when there is nothing to synchronise.
"""


def _day(payloads: list[Any], result: Result) -> str:
    for payload in payloads:
        for key in ("finished", "started", "date"):
            value = payload.get(key) if isinstance(payload, dict) else None
            stamp = value.get("time") if isinstance(value, dict) else value
            if isinstance(stamp, str) and stamp[:4].isdigit():
                return stamp[:10]
    return result.date


def _markdown_table(rows: Table) -> list[str]:
    lines = ["| " + " | ".join(rows[0]) + " |", "|" + "---|" * len(rows[0])]
    lines += ["| " + " | ".join(row) + " |" for row in rows[1:]]
    return lines


def wrap(command: str, width: int = 90) -> str:
    """A long command over several lines at its flags, as a reader would type it (``\\`` at each end)."""
    if len(command) <= width:
        return command
    lines, line = [], ""
    for word in command.replace(" --", "\0--").split("\0"):
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = "    " + word
        else:
            line = f"{line} {word}" if line else word
    return " \\\n".join([*lines, line])


def section(result: Result, results_dir: Path = RESULTS_DIR) -> list[str]:
    """One result's heading, its day, machine and setup, its table and its reading."""
    payloads = [json.loads((results_dir / source).read_text()) for source in result.sources]
    day = _day(payloads, result)
    lines = [f"## {result.title}", ""]
    lines += [f"- **When:** {day}", f"- **Machine:** {result.machine}", f"- **What ran:** {result.setup}", ""]
    lines += _markdown_table(result.table(payloads))
    if result.reading:
        lines += ["", result.reading]
    lines += ["", "To measure it yourself:", "", "<!-- example: skip a benchmark run -->", "```bash"]
    lines += [wrap(result.command), "```", ""]
    return lines


def render(results_dir: Path = RESULTS_DIR) -> str:
    """The whole page from the results under ``results_dir``."""
    lines = [HEADER]
    for result in RESULTS:
        lines += section(result, results_dir)
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str]) -> int:
    """Rewrite the page, or with ``--check`` say whether it is stale (exit 1)."""
    text = render()
    if "--check" in argv:
        if PAGE.read_text() != text:
            print(f"stale: {PAGE.relative_to(ROOT)}; run python devtools/perfpage.py", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(text)
    print(f"wrote {PAGE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
