"""Starts the measured processes of ``tfdist bench`` and samples their CPU (psutil) and GPU (NVML) use."""

from __future__ import annotations

import bisect
import json
import os
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tfdist.bench import threads as thread_cpu
from tfdist.bench.plan import Command
from tfdist.errors import TfdistError
from tfdist.launcher.plan import ProcessSpec, TaskSlot
from tfdist.launcher.workers import WorkerGroup
from tfdist.worker.contract import RunFiles

POLL_S = 0.1
#: Polls between two per-thread snapshots (each reads every thread's /proc files).
THREAD_EVERY = 5


class RunFailed(TfdistError):
    """A measured run exited with an error or ran past its time limit."""


@dataclass
class Usage:
    """(wall time, cumulative CPU seconds of the process tree) samples, plus GPU samples when available."""

    cpu: list[tuple[float, float]] = field(default_factory=list)
    gpu_util: list[tuple[float, float]] = field(default_factory=list)
    gpu_mem_mb: list[tuple[float, float]] = field(default_factory=list)
    rss_peak_mb: dict[int, float] = field(default_factory=dict)  # pid -> largest resident set seen
    #: Per node (``node0``, ...): (wall time, CPU seconds per ``role/thread``) snapshots (bench/threads.py).
    threads: dict[str, list[tuple[float, thread_cpu.Snapshot]]] = field(default_factory=dict)

    @property
    def peak_rss_mb(self) -> float | None:
        """The largest resident set of any one process of the run: its biggest worker's peak memory."""
        return max(self.rss_peak_mb.values()) if self.rss_peak_mb else None

    def cpu_util(self, start: float, end: float, cores: int) -> float | None:
        """Mean share of all cores the job used between two wall times (interpolated samples)."""
        if len(self.cpu) < 2 or end <= start:
            return None
        used = _interpolate(self.cpu, end) - _interpolate(self.cpu, start)
        return max(0.0, used / ((end - start) * cores))

    def thread_ms(self, window: tuple[float, float], step_s: float) -> dict[str, dict[str, float]]:
        """Per node, the CPU ms per step of each ``role/thread`` within the window."""
        found = {node: thread_cpu.per_step_ms(s, window, step_s) for node, s in self.threads.items()}
        return {node: ms for node, ms in found.items() if ms}

    def gpu(self, start: float, end: float) -> tuple[float | None, float | None]:
        """(mean utilisation 0-1, peak memory MB) within the window, or (None, None) without NVML."""
        util = [v for t, v in self.gpu_util if start <= t <= end]
        mem = [v for t, v in self.gpu_mem_mb if start <= t <= end]
        return (sum(util) / len(util) if util else None, max(mem) if mem else None)


def _interpolate(series: list[tuple[float, float]], at: float) -> float:
    times = [t for t, _ in series]
    i = bisect.bisect_left(times, at)
    if i <= 0:
        return series[0][1]
    if i >= len(series):
        return series[-1][1]
    (t0, v0), (t1, v1) = series[i - 1], series[i]
    return v0 + (v1 - v0) * (at - t0) / max(t1 - t0, 1e-12)


class _Sampler(threading.Thread):
    """Polls the CPU time of a process tree (and NVML, when present) until stopped."""

    def __init__(self, pid: int, usage: Usage, node: int = 0) -> None:
        super().__init__(daemon=True)
        self.pid, self.usage = pid, usage
        self.done = threading.Event()
        self.seen: dict[int, float] = {}  # CPU seconds last seen per pid: exited processes keep theirs
        self.threads_seen: dict[tuple[int, int], tuple[str, float, float]] = {}  # the same per thread
        self.snapshots = usage.threads.setdefault(f"node{node}", [])
        self.nvml = _nvml_handles()

    def run(self) -> None:
        import psutil

        try:
            root = psutil.Process(self.pid)
        except psutil.NoSuchProcess:
            return
        polls = 0
        while not self.done.is_set():
            now = time.time()
            try:
                procs = [root, *root.children(recursive=True)]
            except psutil.NoSuchProcess:
                break
            if polls % THREAD_EVERY == 0:
                self.threads_seen.update(thread_cpu.read_threads([p.pid for p in procs]))
                self.snapshots.append((now, thread_cpu.totals(self.threads_seen)))
            polls += 1
            for proc in procs:
                try:
                    t = proc.cpu_times()
                    rss = proc.memory_info().rss / 2**20
                except psutil.Error:
                    continue
                self.seen[proc.pid] = t.user + t.system
                peaks = self.usage.rss_peak_mb
                peaks[proc.pid] = max(peaks.get(proc.pid, 0.0), rss)
            self.usage.cpu.append((now, sum(self.seen.values())))
            self._sample_gpus(now)
            self.done.wait(POLL_S)

    def _sample_gpus(self, now: float) -> None:
        if not self.nvml:
            return
        import pynvml

        util = [pynvml.nvmlDeviceGetUtilizationRates(h).gpu / 100 for h in self.nvml]
        mem = [pynvml.nvmlDeviceGetMemoryInfo(h).used / 2**20 for h in self.nvml]
        self.usage.gpu_util.append((now, sum(util) / len(util)))
        self.usage.gpu_mem_mb.append((now, sum(mem)))


def _nvml_handles() -> list[Any]:
    """NVML device handles, or [] when nvidia-ml-py, a driver or a GPU is missing."""
    try:
        import pynvml

        pynvml.nvmlInit()
        return [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
    except Exception:  # no library / driver / device: GPU columns stay empty
        return []


@dataclass(frozen=True)
class Finished:
    """A run that exited 0: its chief's bench.json (or each independent copy's), its start, its samples."""

    results: tuple[dict[str, Any], ...]
    started_at: float
    usage: Usage

    @property
    def result(self) -> dict[str, Any]:
        """The chief's (or the first copy's) result."""
        return self.results[0]


def read_results(run_dir: Path) -> tuple[dict[str, Any], ...]:
    """``bench.json`` written by a job's chief, or ``bench-r<rank>.json`` by each of N independent copies
    (in rank order); () when there is neither."""
    chief = Path(RunFiles(str(run_dir)).bench)
    if chief.exists():
        return (json.loads(chief.read_text()),)
    copies = sorted(run_dir.glob("bench-r*.json"), key=lambda p: int(p.stem.removeprefix("bench-r")))
    return tuple(json.loads(p.read_text()) for p in copies)


def run_command(command: Command, *, timeout: float, base_env: Mapping[str, str] | None = None) -> Finished:
    """Run one measured process tree to completion; RunFailed (with the log path) when it does not succeed."""
    return run_commands((command,), timeout=timeout, base_env=base_env)


def run_commands(
    commands: Sequence[Command], *, timeout: float, base_env: Mapping[str, str] | None = None
) -> Finished:
    """Run the process trees of one measured job at once (one per node) and read its results from the
    first command's run directory (one every node sees)."""
    started = time.time()
    usage = run_all(commands, timeout=timeout, base_env=base_env)
    results = read_results(Path(commands[0].run_dir))
    if not results:
        raise RunFailed(f"a run wrote no results; log: {commands[0].log_path}")
    return Finished(results, started, usage)


def run_all(
    commands: Sequence[Command], *, timeout: float, base_env: Mapping[str, str] | None = None
) -> Usage:
    """Run process trees at once, in the launcher's ``WorkerGroup``, and return their CPU/GPU samples; the
    first to fail stops the others (its peers would wait for it) and RunFailed names its log."""
    specs = []
    for i, command in enumerate(commands):
        Path(command.run_dir).mkdir(parents=True, exist_ok=True)
        env = {**(base_env if base_env is not None else os.environ), **command.env}
        slot = TaskSlot("run", i, i, 0)
        specs.append(ProcessSpec(slot, command.argv, env, command.log_path, label=f"run{i}"))
    group = WorkerGroup(specs, prefix=False, console_names=set())  # measured runs write their logs only
    samplers: list[_Sampler] = []
    try:
        group.start()
        for node, worker in enumerate(group.workers):
            samplers.append(_Sampler(worker.popen.pid, Usage(), node))  # one per tree; merged below
            samplers[-1].start()
        failed = group.wait(time.monotonic() + timeout)
    finally:
        group.kill()  # each in its own session: the whole tree, and nothing else
        for sampler in samplers:
            sampler.done.set()
            sampler.join(timeout=5)
    if failed is not None:
        worker, code = failed
        command = commands[group.workers.index(worker)]
        if code is None:
            raise RunFailed(
                f"a run took longer than {timeout:.0f} s and was stopped; log: {command.log_path}"
            )
        tail = Path(command.log_path).read_text(errors="replace").strip().splitlines()[-3:]
        raise RunFailed(
            f"a run exited with code {code}; log: {command.log_path}"
            + (f" (last line: {tail[-1]})" if tail else "")
        )
    usages = [sampler.usage for sampler in samplers]
    return usages[0] if len(usages) == 1 else _merged(usages)


def _merged(usages: Sequence[Usage]) -> Usage:
    """One Usage for several process trees sampled side by side: CPU seconds add up at each time."""
    times = sorted({t for u in usages for t, _ in u.cpu})
    merged = Usage()
    for t in times:
        merged.cpu.append((t, sum(_interpolate(u.cpu, t) for u in usages if u.cpu)))
    for u in usages:
        merged.gpu_util += u.gpu_util
        merged.gpu_mem_mb += u.gpu_mem_mb
        merged.rss_peak_mb.update(u.rss_peak_mb)
        merged.threads.update(u.threads)
    merged.gpu_util.sort()
    merged.gpu_mem_mb.sort()
    return merged
