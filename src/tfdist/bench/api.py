"""``tfdist.bench.run_bench``: run the grid (and the diagnosis probes), then write and print the report."""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from tfdist.bench.breakdown import bounds, breakdown, medians
from tfdist.bench.config import BenchConfig
from tfdist.bench.diagnose import Diagnosis, Evidence, diagnose
from tfdist.bench.plan import (
    LOCAL,
    BenchPlan,
    Command,
    RunSpec,
    command_for,
    node_commands,
    on_node,
    plan_bench,
    program_for,
)
from tfdist.bench.preflight import preflight
from tfdist.bench.runner import Finished, RunFailed, run_all, run_commands
from tfdist.bench.scaling import bench_predictions
from tfdist.bench.stats import Sample, combine_copies, common_window, sample_from_summary, summarize
from tfdist.diagnose.linkreport import describe, link_of, probe_pairs
from tfdist.diagnose.linkreport import diagnosis as link_diagnosis
from tfdist.worker.contract import RunFiles


def machine() -> dict[str, Any]:
    """Cores and visible GPUs (without importing TensorFlow)."""
    from tfdist.nodes import visible_gpus

    return {
        "cores": os.cpu_count() or 1,
        "gpus": len(visible_gpus(os.environ)),
        "python": sys.version.split()[0],
    }


class Bench:
    """One ``tfdist bench`` invocation: its plan, the measured samples and the output directory."""

    def __init__(self, config: BenchConfig, say: Callable[[str], None] = print) -> None:
        self.config, self.say = config, say
        self.machine = machine()
        cores = config.cpus_per_host or self.machine["cores"]  # what each node's workers share
        self.plan: BenchPlan = plan_bench(config, cores=cores, gpus=self.machine["gpus"])
        self.out = Path(config.out)
        self._runs = 0
        self.links: list[dict[str, Any]] = []
        #: Each configuration's step breakdowns (one per repeat), from its timeline (``--timeline``).
        self.parts: dict[str, list[dict[str, float]]] = {}
        #: The workload's trainable parameters, as its runs report them (0 before any).
        self.params = 0
        preflight(config, self.plan)

    def _command(self, spec: RunSpec, name: str, mode: str = "train", program: tuple[str, ...] = ()) -> Any:
        """The commands of one run: one, or one per node across nodes."""
        run_dir = str(self.out / "runs" / name)
        kw: dict[str, Any] = {
            "python": sys.executable,
            "threads": self.plan.threads,
            "gpus": self.machine["gpus"],
            "run_dir": run_dir,
            "log_path": str(self.out / "logs" / f"{name}.log"),
            "timeout": self.config.run_timeout,
            "cpus_per_host": self.config.cpus_per_host,
        }
        program = program or program_for(spec, self.config, run_dir, mode)
        if not self.config.hosts:
            return (command_for(spec, program, **kw),)
        # A new port range per run: a port the previous run's peers just closed may still be taken.
        self._runs += 1
        port = self.config.base_port + (self._runs % 90) * 10
        return node_commands(
            spec, program, hosts=self.config.hosts, on_host=self.config.on_host, port=port, **kw
        )

    def _sample(self, finished: Finished) -> Sample:
        """The run's timing, plus its CPU/GPU use over the measured steps only (no startup, no warm-up)."""
        warmup, started = self.config.warmup_steps, finished.started_at
        shared = common_window(finished.results, warmup) if len(finished.results) > 1 else None
        copies = [sample_from_summary(r, warmup, started, within=shared) for r in finished.results]
        self.params = max([self.params, *(int(r.get("params") or 0) for r in finished.results)])
        sample = combine_copies(copies) if len(copies) > 1 else copies[0]
        gpu_util, gpu_mem = finished.usage.gpu(*sample.window)
        cpu_util = finished.usage.cpu_util(*sample.window, cores=self.machine["cores"])
        step_s = statistics.mean(sample.step_times_s) if sample.step_times_s else 0.0
        return replace(
            sample,
            thread_ms=finished.usage.thread_ms(sample.window, step_s),
            cpu_util=cpu_util,
            gpu_util=gpu_util,
            gpu_mem_mb=gpu_mem,
            peak_rss_mb=finished.usage.peak_rss_mb,
        )

    def measure_grid(self) -> dict[RunSpec, list[Sample]]:
        """Every configuration ``repeats`` times, alternating the order between repeats."""
        results: dict[RunSpec, list[Sample]] = {spec: [] for spec in self.plan.runs}
        total, done = len(self.plan.runs) * self.config.repeats, 0
        for repeat in range(self.config.repeats):
            for spec in self.plan.order(repeat):
                done += 1
                self.say(f"[{done}/{total}] {spec.name} (repeat {repeat + 1})")
                finished = run_commands(
                    self._command(spec, f"{spec.name}-{repeat}"), timeout=self.config.run_timeout + 60
                )
                sample = replace(self._sample(finished), load_1min=os.getloadavg()[0])
                results[spec].append(sample)
                self._read_timeline(spec, self.out / "runs" / f"{spec.name}-{repeat}" / "timeline")
        return results

    def _read_timeline(self, spec: RunSpec, folder: Path) -> None:
        """The run's step breakdown (:mod:`tfdist.bench.breakdown`), when it wrote traces."""
        traces = [json.loads(p.read_text()) for p in sorted(folder.glob("timeline-r*.json"))]
        parts = breakdown(traces, self.config.warmup_steps) if traces else {}
        if parts:
            self.parts.setdefault(spec.name, []).append(parts)

    def _breakdowns(self, rows: list[dict[str, Any]]) -> None:
        """Each row's breakdown (medians over its repeats) and, across a measured link, its bounds, with
        the unsynchronised copies' compute at the same size when they ran (a backward pass slowed by the
        sums then shows as time above the bound)."""
        for row in rows:
            if row["name"] in self.parts:
                row["breakdown"] = {k: round(v, 3) for k, v in medians(self.parts[row["name"]]).items()}
        alone = {
            (r["nodes"], r["workers"]): r["breakdown"].get("forward + backward")
            for r in rows
            if r["backend"] == "independent" and "breakdown" in r
        }
        for row in rows:
            if row.get("breakdown") and row.get("link"):
                compute = alone.get((row["nodes"], row["workers"]))
                row["bounds"] = bounds(row["breakdown"], float(row["link"]["gbit_s"]), compute)

    def run_diagnosis(self, rows: list[dict[str, Any]]) -> Diagnosis:
        """Input alone, compute alone, one all-reduce per backend, and the grid's full steps."""
        one = RunSpec(1, 1, LOCAL)
        self.say("diagnose: input pipeline alone")
        input_eps = run_commands(
            self._command(one, "diagnose-input", "input"), timeout=self.config.run_timeout
        ).result["examples_per_sec"]
        self.say("diagnose: compute alone (in-memory batch)")
        compute = run_commands(
            self._command(one, "diagnose-compute", "compute"), timeout=self.config.run_timeout
        )
        compute_eps = self._sample(compute).examples_per_sec
        params = int(compute.result["params"])
        largest_spec = max(self.plan.runs, key=lambda s: (s.workers, s.nodes))
        workers = largest_spec.workers
        allreduce: dict[str, float] = {}
        if workers > 1:
            for backend in self.config.backends:
                self.say(f"diagnose: one all-reduce of {params:,} floats over {workers} workers ({backend})")
                allreduce[backend] = self._allreduce(replace(largest_spec, backend=backend), params)
        largest = [
            r
            for r in rows
            if r["workers"] == workers and r["replicas"] == 1 and r["backend"] in self.config.backends
        ]
        single = [r for r in rows if r["workers"] == 1 and r["replicas"] == 1]
        evidence = Evidence(
            workers=workers,
            replicas=1,
            batch_per_replica=self.config.batch_size_per_replica,
            cores=self.machine["cores"],
            gpus=self.machine["gpus"],
            threads=self.plan.threads,
            input_eps=float(input_eps),
            compute_eps=compute_eps,
            gradient_mb=params * 4 / 1e6,
            allreduce_s=allreduce,
            full_eps={r["backend"]: r["examples_per_sec"] for r in largest if workers > 1},
            cpu_util={
                r["backend"]: r["cpu_util"] for r in largest if workers > 1 and r["cpu_util"] is not None
            },
            single_eps=single[0]["examples_per_sec"] if single else None,
        )
        return diagnose(evidence)

    def _allreduce(self, spec: RunSpec, floats: int) -> float:
        name = f"diagnose-allreduce-{spec.backend}"
        result = RunFiles(str(self.out / "runs" / name)).bench
        program: tuple[str, ...] = ("-m", "tfdist.bench.probes", "allreduce", "--backend", spec.backend)
        program += ("--floats", str(floats), "--out", result)
        commands = self._command(spec, name, program=program)
        return float(run_commands(commands, timeout=self.config.run_timeout + 60).result["median_s"])

    def probe_links(self) -> list[dict[str, Any]]:
        """One probe per pair of the hosts given (also those the grid does not use): bandwidth and round
        trip, both ends' interfaces."""
        probes = []
        for number, (a, b) in enumerate(probe_pairs(self.config.hosts)):
            self.say(f"link: {a} -> {b}")
            probes.append(self._probe_pair(a, b, self.config.base_port - 1 - number))
        return probes

    def _probe_pair(self, a: str, b: str, port: int) -> dict[str, Any]:
        folder = self.out / "runs" / f"link-{a}-{b}"
        folder.mkdir(parents=True, exist_ok=True)

        def side(host: str, role: str, *args: str) -> Command:
            argv = (*on_node(self.config.on_host, host), sys.executable, "-m", "tfdist.diagnose.link", role)
            argv += (*args, "--port", str(port), "--timeout", "60")
            return Command(argv, {}, str(folder), str(self.out / "logs" / f"link-{a}-{b}-{role}.log"))

        serve = side(b, "serve", "--out", str(folder / "b.json"))
        run_all((serve, side(a, "measure", "--peer", b, "--out", str(folder / "a.json"))), timeout=120)
        side_a = json.loads((folder / "a.json").read_text())
        side_b = json.loads((folder / "b.json").read_text())
        return {
            "a": a,
            "b": b,
            "gbit_s": side_a["gbit_s"],
            "rtt_ms": side_a["rtt_ms"],
            "interface_a": side_a["interface"],
            "interface_b": side_b["interface"],
            "speed_mbit": side_a["speed_mbit"] or side_b["speed_mbit"],
            "mtu": side_a["mtu"],
        }

    def run(self) -> dict[str, Any]:
        """Measure, diagnose when asked, write the files and return the results payload."""
        started = time.time()
        load_before = os.getloadavg()[0]
        if len(self.config.hosts) > 1:
            self.links = self.probe_links()
        rows = summarize(self.measure_grid())
        for row in rows:
            row["link"] = link_of(self.links, self.config.hosts[: row["nodes"]])
            row["link_text"] = describe(row["link"])
        self._breakdowns(rows)
        # float32 gradients: what one step all-reduces, for the scaling model across nodes.
        predictions = bench_predictions(rows, self.params * 4.0) if self.links and self.params else {}
        payload: dict[str, Any] = {
            "tool": "tfdist bench",
            "settings": {
                **{k: v for k, v in vars(self.config).items() if k != "out"},
                "warmup": self.config.warmup_steps,  # the steps run, the default resolved
                "threads": self.plan.threads,
                "log_every": self.config.log_every,
            },
            "machine": {
                **self.machine,
                "load_1min_before": load_before,
                "load_1min_after": os.getloadavg()[0],
            },
            "runs": rows,
            "skipped": list(self.plan.skipped),
            "warnings": list(self.plan.warnings),
        }
        if self.links:
            payload["link"] = {"probes": self.links, "diagnosis": link_diagnosis(self.links)}
        if predictions:
            payload["predictions"] = predictions
        if self.config.diagnose:
            d = self.run_diagnosis(rows)
            payload["diagnosis"] = {
                "bottleneck": d.bottleneck,
                "backend": d.backend,
                "evidence": list(d.evidence),
                "recommendation": d.recommendation,
            }
        payload["duration_s"] = time.time() - started
        from tfdist.bench.report import write_all

        write_all(self.out, payload)
        return payload


def run_bench(config: BenchConfig, say: Callable[[str], None] = print) -> dict[str, Any]:
    """Run ``config`` and return the results (also written to ``config.out``)."""
    return Bench(config, say).run()


__all__ = ["Bench", "RunFailed", "run_bench"]
