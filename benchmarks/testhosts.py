"""Runs across test hosts: network namespaces of this machine (``scripts/testhosts.sh``, prefix ``tfdb``;
needs root), one worker per host, every link capped at each rate of ``--links`` in turn. ``--variant``:

- ``bench`` (default): ``tfdist bench --timeline`` (mnist-cnn on synthetic data, batch 64 and one thread
  per worker, the configurations alternated over ``--repeats``) on one host with 2 workers, ``--backend
  tf,mpi --compare all`` (unless ``--no-one-host``), and on two hosts per link with ``--backends``,
  ``--buckets`` and ``--compression`` beside ``--compare independent,raw-tf``, each host's processes on
  ``--cpus-per-host`` of its cores (0: all; the hosts share this machine's cores); ``summary.json``: per
  place, each configuration's rate, its ratios to the limit and the tutorial loop (also repeat by repeat),
  its step's parts and bounds (:mod:`tfdist.bench.breakdown`) and its threads' CPU per step
  (:mod:`tfdist.bench.threads`);
- ``scaling``: eight hosts, ``tfdist bench --nodes 2,4,8 --backend mpi --bucket-mb 0 --compare
  independent``: the model of :mod:`tfdist.bench.scaling` fitted at 2 nodes against the measured 4 and 8;
  and the model at Horovod's paper's setting (Sergeev & Del Balso, 2018: about 90 % scaling efficiency at
  512 GPUs, 128 servers of 4 Pascal GPUs, 25 Gbit/s RoCE, ResNet-101 and Inception V3);
- ``horovod``: Horovod's ``DistributedGradientTape`` loop and ``tfdist.fit`` (``_worker.py``) with one sum
  and 2 MB buckets, beside one unsynchronised 1-rank job per host; ratios taken repeat by repeat.

    python benchmarks/testhosts.py --repeats 3 --out benchmarks/results/link-breakdown
    python benchmarks/testhosts.py --variant scaling --links 1gbit,uncapped
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))  # the shared _common.py
from _common import TESTHOSTS, alternate, cap_links, ratio_each, testhosts, tfdist_bench, write_json

from tfdist.bench.plan import pinned
from tfdist.bench.scaling import Link, allreduce_s, efficiency

HOSTS = {"TFDIST_HOSTS_PREFIX": "tfdb", "TFDIST_HOSTS_SUBNET": "10.90.0"}
ON_HOST = f"{TESTHOSTS} exec {{host}} --"
#: Each variant's hosts, result and steps.
VARIANTS = {
    "bench": (2, "benchmarks/results/link-breakdown", 40),
    "scaling": (8, "benchmarks/results/scaling-nodes", 20),
    "horovod": (2, "benchmarks/results/horovod-nodes.json", 40),
}
BENCH = ("--workload", "mnist-cnn", "--dataset", "synthetic", "--threads", "1")
BENCH += ("--batch-size-per-replica", "64")
#: The rows of a bench summary: a configuration's step split into parts, its bytes and bounds.
PARTS = ("step", "forward + backward", "all-reduce", "update", "all-reduce + update", "mb_across_nodes")
PARTS += ("waiting for the slowest rank",)
#: Horovod's paper, with what it does not state ASSUMED from public figures of the time: parameters from
#: keras.applications; a P100 step at batch 64 (about 130 images/s for ResNet-101, 140 for Inception V3);
#: 4 GPUs of a server on PCIe 3.0 (~80 Gbit/s); RoCE's per-message latency ~5 us.
PAPER = {"nodes": 128, "gpus_per_node": 4, "node_gbit_s": 80.0, "published_efficiency": 0.90}
PAPER_LINK = Link(gbit_s=25.0, latency_s=5e-6)
PAPER_MODELS = {"ResNet-101": (44.7e6, 64 / 130), "Inception V3": (23.9e6, 64 / 140)}  # parameters, step s
_ports = itertools.count(31000, 20)


def summary_rows(results: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each configuration of a results.json: its rate, ratios (also repeat by repeat), parts and bounds."""
    runs = {r["name"]: r for r in results["runs"]}
    rows = {}
    for name, r in runs.items():
        size = "-".join(p for p in name.split("-") if p[:1] in "nwr" and p[1:].isdigit())
        limit = runs.get(f"independent-{size}")
        each = ratio_each(r["examples_per_sec_all"], limit["examples_per_sec_all"]) if limit else None
        parts = r.get("breakdown", {})
        rows[name] = {
            "examples_per_sec": r["examples_per_sec"],
            "examples_per_sec_all": r["examples_per_sec_all"],
            "vs_independent": r.get("vs_independent"),
            "vs_raw_tf": r.get("vs_raw_tf"),
            "vs_independent_per_repeat": {"each": each, "median": statistics.median(each) if each else None},
            **{k: parts[k] for k in PARTS if k in parts},
            **r.get("bounds", {}),
            "cpu_ms_per_step": r.get("cpu_ms_per_step"),
        }
    return rows


def bench(args: argparse.Namespace, summary: dict[str, Any], _: Path) -> None:
    """The ``bench`` variant: one host, then two hosts per link."""
    length = ("--steps", str(args.steps), "--warmup", str(args.warmup), "--repeats", str(args.repeats))
    common = (*BENCH, *length, "--timeline")
    summary["places"] = {}
    if not args.no_one_host:
        grid = ("--workers", "2", "--backend", "tf,mpi", "--compare", "all")
        found = summary_rows(tfdist_bench(args.out / "one-host", *common, *grid, env=HOSTS))
        summary["places"]["one host"] = found
        summary["single_step_ms"] = found.get("independent-w2-r1", {}).get("step")
    wire = "" if args.compression == "none" else f", {args.compression} wire"
    grid = ("--hosts", "node1,node2", "--nodes", "2", "--on-host", ON_HOST, "--backend", args.backends)
    grid += ("--bucket-mb", args.buckets, "--compression", args.compression)
    grid += ("--cpus-per-host", str(args.cpus_per_host)) if args.cpus_per_host else ()
    summary["cpus_per_host"] = args.cpus_per_host  # 0: the hosts share all of this machine's cores
    for link in links(args):
        out = args.out / (link + wire.replace(", ", "-").replace(" wire", ""))
        found = tfdist_bench(out, *common, *grid, "--compare", "independent,raw-tf", env=HOSTS)
        summary["places"][f"two hosts, {link}{wire}"] = rows = summary_rows(found)
        summary.setdefault("single_step_ms", rows.get("independent-n2-w2-r1", {}).get("step"))


def scaling(args: argparse.Namespace, summary: dict[str, Any], _: Path) -> None:
    """The ``scaling`` variant: the model checked at 4 and 8 hosts per link, then at the paper's setting."""
    grid = ("--hosts", ",".join(f"node{i}" for i in range(1, 9)), "--nodes", "2,4,8", "--on-host", ON_HOST)
    grid += ("--backend", "mpi", "--bucket-mb", "0", "--compare", "independent", "--run-timeout", "1200")
    length = ("--steps", str(args.steps), "--warmup", "5", "--repeats", str(args.repeats))
    summary["links"] = {}
    for link in links(args):
        results = tfdist_bench(args.out / link, *BENCH, *grid, *length, env=HOSTS)
        checked = {}
        for r in (r for r in results["runs"] if "predicted_step_s" in r):
            step, predicted = r["step_time_median_s"] * 1e3, r["predicted_step_s"] * 1e3
            checked[r["name"]] = {"measured_step_ms": step, "predicted_step_ms": predicted}
            checked[r["name"]] |= {"error": r["predicted_error"], "vs_independent": r.get("vs_independent")}
        summary["links"][link] = {"checked": checked, "model": results.get("predictions", {})}
    link, nodes, per_node = PAPER_LINK, PAPER["nodes"], PAPER["gpus_per_node"]
    summary["paper"] = {"setting": {**PAPER, "link_gbit_s": link.gbit_s, "latency_s": link.latency_s}}
    for name, (params, compute) in PAPER_MODELS.items():
        nbytes = 4 * params
        reduce_s = allreduce_s(nodes, nbytes, link, per_node, PAPER["node_gbit_s"])
        summary["paper"][name] = {
            "gradient_mb": nbytes / 1e6,
            "compute_ms": compute * 1e3,
            "allreduce_ms": reduce_s * 1e3,
            "efficiency_no_overlap": efficiency(compute + reduce_s, compute),
            "efficiency_full_overlap": efficiency(max(compute, reduce_s), compute),
            # The share of the all-reduce the published figure implies was hidden behind the backward pass.
            "implied_hidden_share": 1 - (compute / PAPER["published_efficiency"] - compute) / reduce_s,
        }


def on_two_hosts(program: list[str], env: dict[str, str], tmp: Path, *, job: bool = True) -> list[Path]:
    """``tfdist launch --backend mpi -n 1`` of ``program`` (its last argument an output file, made per host)
    on node1 and node2, each on its own core (as ``tfdist bench --cpus-per-host 1``): one 2-rank job, or
    (``job=False``) one 1-rank job per host; the output files."""
    folder = Path(tempfile.mkdtemp(dir=tmp))
    common = ["launch", "--backend", "mpi", "-n", "1", "--cpu", "--quiet-workers"]
    if job:
        common += ["--nnodes", "2", "--hosts", "node1,node2", "--base-port", str(next(_ports))]
    procs = []
    for rank, host in enumerate(("node1", "node2")):
        command = [TESTHOSTS, "exec", host, "--", *pinned(sys.executable, rank, 1), sys.executable, "-m"]
        command += ["tfdist", *common, *(["--node-rank", str(rank)] if job else [])]
        command += ["--run-dir", str(folder / host), *program, str(folder / f"{host}.json")]
        procs.append(subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
    outputs = [p.communicate(timeout=900)[0].decode(errors="replace") for p in procs]
    if any(p.returncode for p in procs):
        raise SystemExit(f"{' '.join(program)} failed:\n" + "\n".join(o[-2000:] for o in outputs))
    return sorted(folder.glob("node*.json"))


def horovod(args: argparse.Namespace, summary: dict[str, Any], tmp: Path) -> None:
    """The ``horovod`` variant: per link, the configurations rotated within each repeat."""
    #: name -> (the program's mode, TFDIST_BUCKET_MB; None: one unsynchronised 1-rank job per host)
    configs = {"independent": ("hvd-tape", None), "hvd-b0": ("hvd-tape", "0"), "hvd-b2": ("hvd-tape", "2")}
    configs["fit-b2"] = ("tfdist-fit", "2")
    worker = str(Path(__file__).with_name("_worker.py"))

    def rate(config: str, _: int) -> float:
        """Examples/s per rank of one configuration's timed epoch."""
        mode, bucket_mb = configs[config]
        env = {**rank_env(args), "TFDIST_BUCKET_MB": bucket_mb or "0"}
        found = on_two_hosts([worker, mode, str(args.steps)], env, tmp, job=bucket_mb is not None)
        results = [json.loads(path.read_text()) for path in found]  # the job's rank 0, or each copy
        return statistics.mean(r["examples_per_sec"] / r["ranks"] for r in results)

    def show(repeat: int, config: str, value: float) -> str:
        return f"{config} repeat {repeat}: {value:.0f} ex/s per rank"

    summary["links"] = {}
    for link in links(args):
        rates = alternate(list(configs), args.repeats, rate, show=show)
        summary["links"][link] = {
            config: {
                "examples_per_sec_per_rank": values,
                "vs_independent_each": ratio_each(values, rates["independent"]),
                "vs_independent_median": statistics.median(ratio_each(values, rates["independent"])),
            }
            for config, values in rates.items()
        }


def links(args: argparse.Namespace) -> Iterator[str]:
    """Each link rate of ``--links``, every host capped at it before it is yielded."""
    for rate in filter(None, args.links.split(",")):
        cap_links(HOSTS, VARIANTS[args.variant][0], rate)
        print(f"{args.variant}: {rate}", flush=True)
        yield rate


def rank_env(args: argparse.Namespace) -> dict[str, str]:
    """The ranks' environment: this one without a job's variables, with the test hosts' and ``--env``'s."""
    mine = {k: v for k, v in os.environ.items() if not k.startswith(("TF_CONFIG", "SLURM_", "TFDIST_"))}
    return {**mine, **HOSTS, "TF_CPP_MIN_LOG_LEVEL": "2", **dict(e.split("=", 1) for e in args.env)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--variant", choices=VARIANTS, default="bench")
    parser.add_argument("--links", default="1gbit,uncapped", help="link rates; '' for none (bench: one host)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, help="measured steps (default per variant)")
    parser.add_argument("--warmup", type=int, default=10, help="bench: steps before the measured ones")
    parser.add_argument("--no-one-host", action="store_true", help="bench: only the two-host runs")
    parser.add_argument("--backends", default="tf,mpi", help="bench: the two-host runs' backends")
    parser.add_argument("--buckets", default="0,2", help="bench: the MPI backend's bucket sizes")
    parser.add_argument("--compression", default="none", help="bench: the MPI backend's wire(s)")
    parser.add_argument("--cpus-per-host", type=int, default=1, help="bench: two hosts' cores each (0: all)")
    parser.add_argument("--env", action="append", default=[], help="horovod: NAME=VALUE for the ranks")
    parser.add_argument("--out", type=Path, help="the result (default per variant)")
    args = parser.parse_args()
    hosts, out, steps = VARIANTS[args.variant]
    args.out, args.steps = args.out or Path(out), args.steps or steps
    summary: dict[str, Any] = {"benchmark": f"testhosts-{args.variant}", "date": time.strftime("%FT%T")}
    summary["load_1min_start"] = os.getloadavg()[0]
    up = any(args.links.split(","))
    if up:
        testhosts(HOSTS, "up", str(hosts))
    try:
        with tempfile.TemporaryDirectory() as tmp:
            run = {"bench": bench, "scaling": scaling, "horovod": horovod}[args.variant]
            run(args, summary, Path(tmp))
    finally:
        if up:
            testhosts(HOSTS, "down")
    summary["load_1min_end"] = os.getloadavg()[0]
    write_json(args.out / "summary.json" if args.out.suffix != ".json" else args.out, summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
