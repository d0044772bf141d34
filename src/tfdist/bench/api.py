"""``tfdist.bench.run_bench``: run the grid (and the diagnosis probes), then write and print the report."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from tfdist.bench.config import BenchConfig
from tfdist.bench.diagnose import Diagnosis, Evidence, diagnose
from tfdist.bench.plan import (
    LOCAL,
    BenchPlan,
    RunSpec,
    command_for,
    plan_bench,
    program_for,
)
from tfdist.bench.preflight import preflight
from tfdist.bench.runner import Finished, RunFailed, run_command
from tfdist.bench.stats import Sample, combine_copies, common_window, sample_from_summary, summarize


def machine() -> dict[str, Any]:
    """Cores and visible GPUs (without importing TensorFlow)."""
    from tfdist.launch.gpus import visible_gpus

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
        self.plan: BenchPlan = plan_bench(config, cores=self.machine["cores"], gpus=self.machine["gpus"])
        self.out = Path(config.out)
        preflight(config, self.plan)

    def _command(self, spec: RunSpec, name: str, mode: str = "train", program: tuple[str, ...] = ()) -> Any:
        run_dir = str(self.out / "runs" / name)
        return command_for(
            spec,
            program or program_for(spec, self.config, run_dir, mode),
            python=sys.executable,
            threads=self.plan.threads,
            gpus=self.machine["gpus"],
            run_dir=run_dir,
            log_path=str(self.out / "logs" / f"{name}.log"),
            timeout=self.config.run_timeout,
        )

    def _sample(self, finished: Finished) -> Sample:
        """The run's timing, plus its CPU/GPU use over the measured steps only (no startup, no warm-up)."""
        warmup, started = self.config.warmup, finished.started_at
        shared = common_window(finished.results, warmup) if len(finished.results) > 1 else None
        copies = [sample_from_summary(r, warmup, started, within=shared) for r in finished.results]
        sample = combine_copies(copies) if len(copies) > 1 else copies[0]
        gpu_util, gpu_mem = finished.usage.gpu(*sample.window)
        cpu_util = finished.usage.cpu_util(*sample.window, cores=self.machine["cores"])
        return replace(
            sample,
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
                finished = run_command(
                    self._command(spec, f"{spec.name}-{repeat}"), timeout=self.config.run_timeout + 60
                )
                results[spec].append(self._sample(finished))
        return results

    def run_diagnosis(self, rows: list[dict[str, Any]]) -> Diagnosis:
        """Input alone, compute alone, one all-reduce per backend, and the grid's full steps."""
        one = RunSpec(1, 1, LOCAL)
        self.say("diagnose: input pipeline alone")
        input_eps = run_command(
            self._command(one, "diagnose-input", "input"), timeout=self.config.run_timeout
        ).result["examples_per_sec"]
        self.say("diagnose: compute alone (in-memory batch)")
        compute = run_command(
            self._command(one, "diagnose-compute", "compute"), timeout=self.config.run_timeout
        )
        compute_eps = self._sample(compute).examples_per_sec
        params = int(compute.result["params"])
        workers = max(self.config.workers)
        allreduce: dict[str, float] = {}
        if workers > 1:
            for backend in self.config.backends:
                self.say(f"diagnose: one all-reduce of {params:,} floats over {workers} workers ({backend})")
                allreduce[backend] = self._allreduce(backend, workers, params)
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

    def _allreduce(self, backend: str, workers: int, floats: int) -> float:
        name = f"diagnose-allreduce-{backend}"
        result = str(self.out / "runs" / name / "bench.json")
        program = ("-m", "tfdist.bench.probes", "allreduce", "--backend", backend, "--floats", str(floats))
        command = self._command(RunSpec(workers, 1, backend), name, program=(*program, "--out", result))
        return float(run_command(command, timeout=self.config.run_timeout + 60).result["median_s"])

    def run(self) -> dict[str, Any]:
        """Measure, diagnose when asked, write the files and return the results payload."""
        started = time.time()
        rows = summarize(self.measure_grid())
        payload: dict[str, Any] = {
            "tool": "tfdist bench",
            "settings": {
                **{k: v for k, v in vars(self.config).items() if k != "out"},
                "threads": self.plan.threads,
                "log_every": self.config.log_every,
            },
            "machine": self.machine,
            "runs": rows,
            "skipped": list(self.plan.skipped),
            "warnings": list(self.plan.warnings),
        }
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
