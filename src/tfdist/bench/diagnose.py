"""Pure bottleneck diagnosis: input, compute, communication or oversubscription, with the evidence."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

#: Below this weak-scaling efficiency the distributed step is losing time to synchronisation.
EFFICIENCY_OK = 0.9
#: An all-reduce taking this share of the full step dominates it on its own.
COMM_SHARE = 0.3


@dataclass(frozen=True)
class Evidence:
    """What ``--diagnose`` measured for one workload (rates are examples/s; times are seconds)."""

    workers: int
    replicas: int  # per worker
    batch_per_replica: int
    cores: int
    gpus: int
    threads: int
    input_eps: float  # one worker's input pipeline alone
    compute_eps: float  # one worker's step on an in-memory batch, no synchronisation
    gradient_mb: float
    allreduce_s: Mapping[str, float] = field(default_factory=dict)  # backend -> one gradient all-reduce
    full_eps: Mapping[str, float] = field(default_factory=dict)  # backend -> whole job at `workers`
    single_eps: float | None = None  # one worker, full step (with its input pipeline)
    #: backend -> CPU seconds of the job / (wall seconds x cores) during its measured steps at `workers`
    cpu_util: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Diagnosis:
    """The named bottleneck, the numbers behind it and what to do about it."""

    bottleneck: str
    backend: str | None
    evidence: tuple[str, ...]
    recommendation: str


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms"


def _account(ev: Evidence, backend: str, t_comp: float) -> str:
    """Where one backend's step goes: compute, other threads' CPU beyond it (collectives, gRPC, input), and
    idle waiting (per worker and step, CPU time = utilisation x cores x step / workers)."""
    batch = ev.batch_per_replica * ev.replicas
    t_full = batch * ev.workers / ev.full_eps[backend]
    cpu = ev.cpu_util[backend] * ev.cores * t_full / ev.workers
    comm = ev.allreduce_s.get(backend)
    return (
        f"where the {backend} step goes ({ev.workers} workers): {_ms(t_full)} = compute {_ms(t_comp)}"
        f" + {_ms(max(t_full - t_comp, 0.0))}; per worker {_ms(cpu)} of CPU per step, "
        f"{_ms(max(cpu - t_comp, 0.0))} of it beyond the compute (other threads: collectives, gRPC, input) "
        f"and {_ms(max(t_full - cpu, 0.0))} idle"
        + (f" (the all-reduce alone takes {_ms(comm)})" if comm is not None else "")
    )


def diagnose(ev: Evidence) -> Diagnosis:
    """Name the bottleneck of the best backend at the largest worker count."""
    batch = ev.batch_per_replica * ev.replicas  # one worker's share of each global batch
    t_comp, t_in = batch / ev.compute_eps, batch / ev.input_eps
    backend = max(ev.full_eps, key=lambda b: ev.full_eps[b]) if ev.full_eps else None
    base = ev.single_eps or ev.compute_eps
    lines = [
        f"input pipeline alone: {ev.input_eps:,.0f} examples/s per worker ({_ms(t_in)} per batch of {batch})",
        f"compute alone (in-memory batch, no synchronisation): {ev.compute_eps:,.0f} examples/s per worker "
        f"({_ms(t_comp)} per step)",
    ]
    for name, seconds in sorted(ev.allreduce_s.items()):
        lines.append(
            f"one all-reduce of the {ev.gradient_mb:.1f} MB gradient over {ev.workers} workers, {name}: "
            f"{_ms(seconds)}"
        )
    efficiency = t_full = t_comm = None
    if backend is not None:
        t_full = batch * ev.workers / ev.full_eps[backend]
        efficiency = ev.full_eps[backend] / ev.workers / base
        t_comm = ev.allreduce_s.get(backend)
        lines.append(
            f"full step, {ev.workers} workers, {backend}: {_ms(t_full)} ({ev.full_eps[backend]:,.0f} "
            "examples/s, "
            f"weak-scaling efficiency {efficiency:.2f} against one worker)"
        )
    lines += [_account(ev, name, t_comp) for name in sorted(ev.full_eps) if name in ev.cpu_util]
    evidence = tuple(lines)

    oversubscribed = ev.workers * ev.replicas > ev.gpus if ev.gpus else ev.workers * ev.threads > ev.cores
    if oversubscribed:
        what = (
            f"{ev.workers * ev.replicas} replicas on {ev.gpus} GPUs"
            if ev.gpus
            else (f"{ev.workers} workers x {ev.threads} threads on {ev.cores} cores")
        )
        return Diagnosis(
            "oversubscription",
            backend,
            (f"{what}: the workers time-slice the hardware", *evidence),
            "Run at most one worker per GPU (or per core's share of threads on CPU): e.g. --workers "
            f"{max(1, ev.gpus or ev.cores // max(ev.threads, 1))}; more processes than hardware only adds "
            "switching.",
        )
    if t_in > t_comp:
        return Diagnosis(
            "input",
            backend,
            (
                f"the input pipeline needs {_ms(t_in)} per batch but the step computes it in {_ms(t_comp)}",
                *evidence,
            ),
            "Speed up the input pipeline before adding workers: map(..., "
            "num_parallel_calls=tf.data.AUTOTUNE), "
            "cache() decoded examples, prefetch(tf.data.AUTOTUNE), and move heavy preprocessing offline.",
        )
    if (
        t_full is not None
        and t_comm is not None
        and efficiency is not None
        and (t_comm >= COMM_SHARE * t_full or (ev.workers > 1 and efficiency < EFFICIENCY_OK))
    ):
        faster = min(ev.allreduce_s, key=lambda b: ev.allreduce_s[b])
        hint = (
            f"Use --backend {faster} (its all-reduce takes {_ms(ev.allreduce_s[faster])} vs {_ms(t_comm)}); "
            if faster != backend and ev.allreduce_s[faster] < 0.8 * t_comm
            else ""
        )
        return Diagnosis(
            "communication",
            backend,
            (
                f"the all-reduce takes {_ms(t_comm)} of a {_ms(t_full)} step and the step is "
                f"{_ms(max(t_full - t_comp, 0.0))} longer than compute alone",
                *evidence,
            ),
            hint + ("r" if hint else "R") + "aise --batch-size-per-replica so each step carries more compute "
            "per byte synchronised, or use a model with fewer parameters per unit of compute.",
        )
    return Diagnosis(
        "compute",
        backend,
        (
            (
                "near-linear scaling: the step is as long as its compute"
                if backend
                else "the step is its compute"
            ),
            *evidence,
        ),
        "Compute is the limit, as it should be: add devices, use --mixed-precision bf16 on hardware with "
        "bf16 units, or --xla to fuse the step.",
    )
