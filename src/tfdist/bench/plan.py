"""Pure planning of a benchmark: which runs, in what order, with which threads, and what to warn about."""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass, replace

from tfdist.bench.config import REFERENCES, BenchConfig, WorkerSpec
from tfdist.launcher.plan import thread_env

#: Single-process runs synchronise nothing across processes: every backend's curve starts from them.
LOCAL = "local"
#: The reference configuration that is the machine's limit: N copies of the one-worker run, unsynchronised.
INDEPENDENT = "independent"
#: The hand-written tutorial loop every other configuration is compared with.
RAW_TF = "raw-tf"


@dataclass(frozen=True)
class RunSpec:
    """One configuration: processes (workers), replicas per process and the synchronisation backend."""

    workers: int  # processes in the whole job (on every node together)
    replicas: int
    backend: str
    nodes: int = 1
    #: The MPI backend's wire: compression (none, fp16, bf16) and bucket size in MB (None: the default).
    compression: str = "none"
    bucket_mb: float | str | None = None

    @property
    def variant(self) -> str:
        """``fp16-b4`` for compression fp16 with 4 MB buckets; ``""`` for the backend's defaults."""
        parts = [self.compression] if self.compression != "none" else []
        parts += [f"b{self._bucket_text}"] if self.bucket_mb is not None else []
        return "-".join(parts)

    @property
    def label(self) -> str:
        """The backend with its variant, e.g. ``mpi-fp16-b4``."""
        return f"{self.backend}-{self.variant}" if self.variant else self.backend

    @property
    def wire_env(self) -> dict[str, str]:
        """The environment that selects the variant in every rank."""
        env = {"TFDIST_COMPRESSION": self.compression} if self.compression != "none" else {}
        if self.bucket_mb is not None:
            env["TFDIST_BUCKET_MB"] = self._bucket_text
        return env

    @property
    def _bucket_text(self) -> str:
        return self.bucket_mb if isinstance(self.bucket_mb, str) else f"{self.bucket_mb:g}"

    @property
    def devices(self) -> int:
        """Replicas in the whole job: the ideal speed-up is proportional to this."""
        return self.workers * self.replicas

    @property
    def size(self) -> str:
        """The job's size without its backend, e.g. ``-w2-r1`` or ``-n2-w2-r1`` across 2 nodes."""
        return (f"-n{self.nodes}" if self.nodes > 1 else "") + f"-w{self.workers}-r{self.replicas}"

    @property
    def name(self) -> str:
        """Stable identifier, e.g. ``mpi-w2-r1``, ``tf-n2-w2-r1`` across 2 nodes, ``mpi-fp16-b4-n2-w2-r1``."""
        return self.label + self.size


@dataclass(frozen=True)
class BenchPlan:
    """The runs, the per-worker thread count, and the notes/warnings the report states."""

    runs: tuple[RunSpec, ...]
    threads: int
    skipped: tuple[str, ...]
    warnings: tuple[str, ...]

    def order(self, repeat: int) -> list[RunSpec]:
        """Run order of one repeat, rotated by one per repeat: a slow drift of the machine is spread over
        every configuration."""
        runs = list(self.runs)
        shift = repeat % len(runs)
        return runs[shift:] + runs[:shift]


def plan_bench(config: BenchConfig, *, cores: int, gpus: int) -> BenchPlan:
    """Expand the grid. One process per worker; replicas are GPUs, or logical CPU devices without GPUs."""
    runs: list[RunSpec] = []
    skipped: list[str] = []
    for nodes in config.node_counts:
        for per_node in config.workers:
            for replicas in config.replicas:
                _expand(config, RunSpec(nodes * per_node, replicas, "", nodes), gpus, runs, skipped)
    # Threads share one node's cores: across nodes, each node runs ``workers`` processes.
    max_workers = max(config.workers)
    threads = config.threads or max(1, cores // max_workers)
    return BenchPlan(
        tuple(runs), threads, tuple(dict.fromkeys(skipped)), tuple(_warnings(config, threads, cores, gpus))
    )


def _expand(config: BenchConfig, size: RunSpec, gpus: int, runs: list[RunSpec], skipped: list[str]) -> None:
    """The configurations of one job size (every backend and reference), or the one local run."""
    workers, replicas, nodes = size.workers, size.replicas, size.nodes
    if workers == 1:
        runs.append(RunSpec(1, replicas, LOCAL))
        return
    for backend in config.backends:
        if gpus and replicas > 1:
            skipped.append(
                f"{workers} workers x {replicas} GPUs each: the launcher hands out one GPU or all "
                "GPUs per worker."
            )
            continue
        if backend == "mpi" and replicas > 1:
            skipped.append(
                f"mpi with {replicas} replicas per worker: the MPI backend runs one replica per rank."
            )
            continue
        if backend == "mpi":
            for compression in config.compression:
                for bucket_mb in config.bucket_mb or (None,):
                    runs.append(RunSpec(workers, replicas, backend, nodes, compression, bucket_mb))
            continue
        runs.append(RunSpec(workers, replicas, backend, nodes))
    for reference in config.compare:
        if replicas > 1:
            skipped.append(f"{reference} with {replicas} replicas per worker: references run one.")
            continue
        runs.append(RunSpec(workers, replicas, reference, nodes))


def _warnings(config: BenchConfig, threads: int, cores: int, gpus: int) -> list[str]:
    out = []
    if (config.compression != ("none",) or config.bucket_mb) and max(config.node_counts) == 1:
        out.append(
            "--compression/--bucket-mb shape the mpi backend's sums across nodes; on one node they share "
            "memory and every variant runs as one uncompressed sum. Hint: --hosts n1,n2 --nodes 2."
        )
    max_workers, max_replicas = max(config.workers), max(config.replicas)
    if gpus:
        if max_workers * max_replicas > gpus:
            out.append(
                f"{max_workers} workers x {max_replicas} replicas asks for more GPUs than the {gpus} "
                "visible: "
                "replicas would share GPUs, so the speed-up past that point measures sharing, not scaling."
            )
        return out
    if max_workers * threads > cores:
        out.append(
            f"{max_workers} workers x {threads} thread(s) > {cores} CPU cores: the workers time-slice the "
            "cores, so the speed-up past that point measures oversubscription, not scaling."
        )
    if max_replicas > 1:
        out.append(
            f"no GPU: {max_replicas} replicas per worker are logical CPU devices that share the worker's "
            f"{threads} thread(s); they test the multi-replica code path but add no compute."
        )
    return out


@dataclass(frozen=True)
class Command:
    """How to start one measured run: argv, environment additions, and where its output goes."""

    argv: tuple[str, ...]
    env: dict[str, str]
    run_dir: str
    log_path: str


def worker_args(config: BenchConfig, run_dir: str, mode: str = "train") -> tuple[str, ...]:
    """The arguments of ``python -m tfdist.bench.worker SPEC_JSON`` for ``config``."""
    return ("-m", "tfdist.bench.worker", WorkerSpec.of(config, run_dir, mode).to_json())


def program_for(spec: RunSpec, config: BenchConfig, run_dir: str, mode: str = "train") -> tuple[str, ...]:
    """What every process of configuration ``spec`` runs (the arguments after ``python``): the bench worker
    (in ``mode``), or for ``raw-tf`` and ``keras-fit`` their reference programs."""
    if mode != "train":
        return worker_args(config, run_dir, mode)
    if spec.backend == INDEPENDENT:
        return worker_args(config, run_dir, "independent")
    if spec.backend in REFERENCES:
        return ("-m", "tfdist.bench.references", spec.backend, WorkerSpec.of(config, run_dir).to_json())
    return worker_args(config, run_dir)


def command_for(
    spec: RunSpec,
    program: tuple[str, ...],
    *,
    python: str,
    threads: int,
    gpus: int,
    run_dir: str,
    log_path: str,
    timeout: float,
    cpus_per_host: int | None = None,
) -> Command:
    """Start ``program`` (arguments after ``python``) as configuration ``spec``: one worker directly, several
    through ``tfdist launch``. Replicas are logical CPU devices without GPUs, else one worker's first GPUs;
    ``cpus_per_host``: the whole command on that many cores (:func:`pinned`).
    """
    # The same thread pools for every process of every run: what makes configurations comparable.
    env = {**thread_env(threads, 1), "TF_CPP_MIN_LOG_LEVEL": "2", **spec.wire_env}
    if gpus == 0:
        env["CUDA_VISIBLE_DEVICES"] = ""
        if spec.replicas > 1:
            env["TFDIST_CPU_REPLICAS"] = str(spec.replicas)
    elif spec.workers == 1:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in range(spec.replicas))
    pin = pinned(python, 0, cpus_per_host)
    if spec.workers == 1:
        return Command((*pin, python, "-u", *program), env, run_dir, log_path)
    launch = _launch(spec, python, spec.workers, gpus, timeout)
    argv = (*pin, *launch, "--run-dir", os.path.join(run_dir, "launch"), *program)
    return Command(argv, env, run_dir, log_path)


def pinned(python: str, node: int, cpus_per_host: int | None) -> tuple[str, ...]:
    """The prefix that runs node ``node``'s command on ``cpus_per_host`` of its cores
    (:mod:`tfdist.bench.pin`), or none.

    Input/Output: ``("python", 1, 2)`` -> ``("python", "-m", "tfdist.bench.pin", "1", "2", "--")``;
    ``("python", 1, None)`` -> ``()``.
    """
    if not cpus_per_host:
        return ()
    return (python, "-m", "tfdist.bench.pin", str(node), str(cpus_per_host), "--")


def _launch(spec: RunSpec, python: str, per_node: int, gpus: int, timeout: float) -> list[str]:
    launch = [python, "-m", "tfdist", "launch", "-n", str(per_node), "--quiet-workers", "--timeout"]
    launch += [str(timeout), *(["--backend", "mpi"] if spec.backend == "mpi" else [])]
    return launch + (["--cpu"] if gpus == 0 else [])


def on_node(on_host: str, host: str) -> tuple[str, ...]:
    """The command prefix that runs a command on ``host``: ``on_host`` with ``{host}`` filled in.

    Input/Output: ``on_node("ssh {host}", "n2")`` -> ``("ssh", "n2")``; ``on_node("", "n2")`` -> ``()``.
    """
    return tuple(shlex.split(on_host.replace("{host}", shlex.quote(host))))


def node_commands(
    spec: RunSpec,
    program: tuple[str, ...],
    *,
    hosts: tuple[str, ...],
    on_host: str,
    port: int,
    python: str,
    threads: int,
    gpus: int,
    run_dir: str,
    log_path: str,
    timeout: float,
    cpus_per_host: int | None = None,
) -> tuple[Command, ...]:
    """One command per node of ``spec``: each node's ``tfdist launch`` of the job (the first ``spec.nodes``
    of ``hosts``, meeting through the static host list), started on that node."""
    one = command_for(
        spec, program, python=python, threads=threads, gpus=gpus, run_dir=run_dir,
        log_path=log_path, timeout=timeout, cpus_per_host=cpus_per_host,
    )  # fmt: skip
    if spec.nodes == 1:
        return (replace(one, argv=(*on_node(on_host, hosts[0]), *one.argv)),)
    launch = _launch(spec, python, spec.workers // spec.nodes, gpus, timeout)
    nodes = ",".join(hosts[: spec.nodes])
    launch += ["--nnodes", str(spec.nodes), "--hosts", nodes, "--base-port", str(port)]
    stem, ext = os.path.splitext(log_path)
    commands = []
    for rank, host in enumerate(hosts[: spec.nodes]):
        where = ("--node-rank", str(rank), "--run-dir", os.path.join(run_dir, f"launch-node{rank}"))
        argv = (*on_node(on_host, host), *pinned(python, rank, cpus_per_host), *launch, *where, *program)
        commands.append(Command(argv, one.env, run_dir, f"{stem}-node{rank}{ext}"))
    return tuple(commands)
