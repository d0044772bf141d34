"""The tables of docs/performance.md, written from the committed results under ``benchmarks/results/`` (and
README's "How fast" lines, :func:`how_fast`, which docs/hooks.py writes as a generated block).

    python devtools/perfpage.py [--check]   # rewrite the page's tables; --check: exit 1 when one is stale

The page's words, a table's header included, are written in the page. A table's rows follow a marker that
names the function of :data:`TABLES` writing them, the JSON file(s) it reads and any further words for it
(``<!-- table: side_by_side fit_overhead.json keras_model_fit tfdist_fit hand_loop -->``). A section's
``- **When:**`` line is the day its first file records (``finished``, ``started`` or ``date``), if any.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = ROOT / "benchmarks" / "results"
PAGE = ROOT / "docs" / "performance.md"
#: A marker, the table's header and rule (kept), its rows (rewritten).
MARKER = re.compile(r"^(?P<head><!-- table: (?P<args>.+?) -->\n\|.*\n\|[-|: ]*\n)(?:\|.*\n)*", re.M)
WHEN = re.compile(r"^- \*\*When:\*\* .*$", re.M)

Rows = list[list[str]]
TABLES: dict[str, Callable[..., Rows]] = {}

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
#: The programs of a benchmark that alternates a few (:func:`side_by_side`), by their key in its JSON.
_PROGRAM_WORDS = {
    "keras_model_fit": "Keras `model.fit`",
    "tfdist_fit": "`tfdist.fit`",
    "hand_loop": "a hand-written `strategy.run` loop",
    "hand-loop": "TensorFlow's tutorial loop",
    "keras-fit": "Keras `model.fit` (tfdist's Keras fix)",
    "tfdist-fit": "`tfdist.fit`",
    "hvd-tape": "a Horovod `DistributedGradientTape` loop",
}
_WIRE_WORDS = {
    "mpi exact": "exact (float32)",
    "mpi exact, 2 MB buckets": "exact, 2 MB buckets",
    "mpi fp16": "16-bit wire, fp16",
    "mpi bf16": "16-bit wire, bf16",
}
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


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _rate(value: float) -> str:
    return f"{value:,.0f}"


def _ms(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:.{digits}f} ms"


def _mib(value: float) -> str:
    return f"{value:,.0f} MiB"


def _link(rate: str) -> str:
    return rate.replace("1gbit", "1 Gbit/s")


def table(rows: Callable[..., Rows]) -> Callable[..., Rows]:
    """Register a function (the JSON of every file, the marker's words) -> rows under its name."""
    TABLES[rows.__name__] = rows
    return rows


@table
def bench_grid(payloads: list[Any]) -> Rows:
    """A ``tfdist bench --compare`` run (results.json): one row per configuration, memory when measured."""
    runs = payloads[0]["runs"]
    memory = any(r.get("peak_rss_mb") for r in runs)
    rows = []
    for r in runs:
        row = [config_words(r["name"]), _rate(r["examples_per_sec"]), _ms(r["step_time_median_s"] * 1e3)]
        row += [_x(r.get("vs_independent")), _x(r.get("vs_raw_tf"))]
        rss = r.get("peak_rss_mb")
        rows.append(row + ([f"{rss:,.0f} MB" if rss is not None else "-"] if memory else []))
    return rows


@table
def side_by_side(payloads: list[Any], *programs: str) -> Rows:
    """Programs alternated in one benchmark (``median_examples_per_sec``): examples/s, against the first."""
    medians = payloads[0]["median_examples_per_sec"]
    return [[_PROGRAM_WORDS[p], _rate(medians[p]), _x(medians[p] / medians[programs[0]])] for p in programs]


@table
def wire_accuracy(payloads: list[Any]) -> Rows:
    """compression_digits.json: what each wire ends with after the same training."""
    runs = payloads[0]["runs"]
    figures = ("final_loss", "final_val_accuracy")
    return [
        [words, *(f"{runs[k][f]:.4f}" for f in figures), f"{runs[k]['max_weight_diff_vs_mpi_exact']:.3f}"]
        for k, words in _WIRE_WORDS.items()
    ]


@table
def scaling_model(payloads: list[Any]) -> Rows:
    """scaling_model.json: predicted efficiency at 8, 16, 64 and 256 GPUs, flat ring / two levels."""
    rows = []
    for model, by_link in payloads[0]["predicted"].items():
        for link, points in by_link.items():
            at = {p["workers"]: p for p in points}
            cells = [
                f"{at[w]['ring_efficiency']:.2f} / {at[w]['two_level_efficiency']:.2f}"
                for w in (8, 16, 64, 256)
            ]
            rows.append([model, link.replace("Gbps", " Gbit/s"), *cells])
    return rows


@table
def shard_memory(payloads: list[Any]) -> Rows:
    """shard_optimizer.json: peak memory per rank while training, sharded (in one piece and in buckets)
    against unsharded."""
    rows = []
    for ranks, r in payloads[0]["by_ranks"].items():
        sharded = (r["sharded"], r["sharded-buckets"])
        row = [ranks, _mib(r["unsharded"]["train_peak_mib"])]
        for m in sharded:
            saved = f"{_mib(m['train_peak_saved_mib'])} ({m['expected_saved_mib']:,.0f})"
            row += [_mib(m["train_peak_mib"]), saved]
        rows.append([*row, ", ".join(_x(m["step_time_ratio_over_unsharded"]) for m in sharded)])
    return rows


@table
def estimate_accuracy(payloads: list[Any]) -> Rows:
    """estimate_accuracy.json: tfdist estimate against the measured peak of a real training process."""
    return [
        [r["model"], f"{r['params'] / 1e6:.1f} M", r["optimizer"], _mib(r["estimate_mib"]), *measured]
        for r in payloads[0]["rows"]
        for measured in [(_mib(r["measured_peak_mib"]), f"{r['error_percent']:+.0f} %")]
    ]


def _group(key: str) -> str:
    """A ``role/thread`` of ``cpu_ms_per_step`` in the table's columns: the compute thread, the rank's
    other threads, tfdist's launcher, MPI's launcher and proxy."""
    role = key.split("/")[0]
    return key if key == "rank/tf_Compute" else role if role in ("rank", "launcher") else "mpi"


@table
def thread_cpu(payloads: list[Any], *labels: str) -> Rows:
    """Summaries of ``benchmarks/testhosts.py``, one per label: each run's step, forward + backward and its
    processes' CPU per step (``cpu_ms_per_step``, the mean of the nodes), the compute thread's wait for a
    core included."""
    rows = []
    for label, summary in zip(labels, payloads, strict=True):
        for place, configs in summary["places"].items():
            for name, r in configs.items():
                nodes = list((r.get("cpu_ms_per_step") or {}).values()) or [{}]
                spent: dict[str, float] = {}
                for key, ms in ((k, v) for node in nodes for k, v in node.items()):
                    group = key if key.endswith(" waiting") else _group(key)
                    spent[group] = spent.get(group, 0.0) + ms / len(nodes)
                cores = summary["cpus_per_host"]
                where = f"{_link(place)}, " + (
                    f"{cores} core(s) each" if cores else "the machine's cores shared"
                )
                cells = [
                    label,
                    where,
                    config_words(name),
                    _ms(r.get("step")),
                    _ms(r.get("forward + backward")),
                ]
                keys = ("rank/tf_Compute", "rank/tf_Compute waiting", "rank", "launcher", "mpi")
                rows.append(cells + [_ms(spent.get(k, 0.0), 1) for k in keys])
    return rows


@table
def compare_commits(payloads: list[Any]) -> Rows:
    """compare_commits.json: each configuration's examples/s at the previous state and now, measured in
    turns on one day, the ratio repeat by repeat, and now against the limit and the tutorial loop."""
    medians = payloads[0]["median_examples_per_sec"]
    base, head = medians["base"], medians["head"]
    rows = []
    for key, ratio in payloads[0]["head_vs_base"].items():
        place, config = key.rsplit("/", 1)
        limit, loop = head.get(f"{place}/independent"), head.get(f"{place}/raw-tf")
        cells = [_link(place), _CONFIG_WORDS.get(config, f"`{config}`"), _rate(base[key]), _rate(head[key])]
        cells += [_x(ratio), _x(head[key] / limit if limit else None), _x(head[key] / loop if loop else None)]
        rows.append(cells)
    return rows


def how_fast(report: dict[str, Any]) -> str:
    """README's lines on speed, from compare_commits.json: the day, how fast it was, the ratios (the
    docs' generated block ``how-fast``, docs/hooks.py)."""
    head = report["median_examples_per_sec"]["head"]

    def ratio(place: str, config: str, against: str) -> str:
        known = f"{place}/{config}" in head
        return f"{head[f'{place}/{config}'] / head[f'{place}/{against}']:.2f}x" if known else "-"

    cores = report.get("cpus_per_host") or 0
    hosts = f"{cores} core(s) per test host" if cores else "the test hosts sharing its 2 cores"
    lines = [
        f"Measured {report['date'][:10]} on a 2-core CPU machine ({hosts}), where one unsynchronised "
        f"mnist-cnn step took {report['single_step_ms']:.0f} ms that day (a slower day lowers every ratio "
        "across a link). "
        "Every figure, with its setup: [Performance](docs/performance.md); to measure your own cluster: "
        "[Benchmarking](docs/guides/benchmarking.md).",
        "",
        "| where | MPI backend against the limit | against TensorFlow's tutorial loop "
        "| TF backend against the loop |",
        "|---|---|---|---|",
    ]
    places = ("one host, 2 workers", "two hosts, 1 Gbit/s link", "two hosts, uncapped link")
    for words, place in zip(places, ("one host", "2 hosts 1gbit", "2 hosts uncapped"), strict=True):
        if f"{place}/mpi" in head:
            mpi = f"{ratio(place, 'mpi', 'independent')} | {ratio(place, 'mpi', 'raw-tf')}"
            lines.append(f"| {words} | {mpi} | {ratio(place, 'tf', 'raw-tf')} |")
    return "\n".join(lines)


def _day(payloads: list[Any]) -> str | None:
    """The day the first file that records one was measured (YYYY-MM-DD), or None."""
    for payload in payloads:
        for key in ("finished", "started", "date"):
            value = payload.get(key)
            stamp = value.get("time") if isinstance(value, dict) else value
            if isinstance(stamp, str) and stamp[:4].isdigit():
                return stamp[:10]
    return None


def render(page: str, results_dir: Path = RESULTS_DIR) -> str:
    """``page`` with the rows of every marked table (and each section's day) written from ``results_dir``."""
    days: list[str] = []

    def fill(marker: re.Match[str]) -> str:
        name, *words = marker["args"].split()
        files = [w for w in words if w.endswith(".json")]
        payloads = [json.loads((results_dir / f).read_text()) for f in files]
        days.extend(filter(None, [_day(payloads)]))
        rows = TABLES[name](payloads, *(w for w in words if not w.endswith(".json")))
        return marker["head"] + "".join("| " + " | ".join(row) + " |\n" for row in rows)

    sections = []
    for section in re.split(r"(?m)^(?=## )", page):
        days.clear()
        section = MARKER.sub(fill, section)
        sections.append(WHEN.sub(f"- **When:** {days[0]}", section, count=1) if days else section)
    return "".join(sections)


def main(argv: list[str]) -> int:
    """Rewrite the page's tables, or with ``--check`` say whether they are stale (exit 1)."""
    committed = PAGE.read_text()
    text = render(committed)
    if "--check" in argv:
        if committed != text:
            print(f"stale: {PAGE.relative_to(ROOT)}; run python devtools/perfpage.py", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(text)
    print(f"wrote {PAGE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
