"""BenchConfig: the options of ``tfdist bench``, validated before anything runs or is written."""

from __future__ import annotations

from dataclasses import dataclass

from tfdist import backends, jsonconfig
from tfdist.errors import ConfigError
from tfdist.nodes import MAX_PORT, check_hosts
from tfdist.sync.wire import COMPRESSIONS, check_bucket_setting, check_compression
from tfdist.workloads.config import TrainConfig

BACKENDS = backends.BENCH_BACKENDS
#: Reference configurations measured beside the backends: N unsynchronised copies of the one-worker run (the
#: machine's limit), TensorFlow's tutorial loop, an unmodified Keras ``model.fit``.
REFERENCES = ("independent", "raw-tf", "keras-fit")


def parse_counts(text: str, flag: str) -> tuple[int, ...]:
    """``"1,2,4"`` -> (1, 2, 4): positive, distinct, in the given order sorted ascending."""
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if not parts:
        raise ConfigError(f"{flag} {text!r} is empty. Hint: a comma-separated list such as 1,2.")
    values = []
    for part in parts:
        if not part.isdigit() or int(part) < 1:
            raise ConfigError(f"{flag} {text!r}: {part!r} is not a positive integer. Hint: e.g. {flag} 1,2.")
        values.append(int(part))
    if len(set(values)) != len(values):
        raise ConfigError(f"{flag} {text!r} repeats a value.")
    return tuple(sorted(values))


def _parse_names(text: str, flag: str, known: tuple[str, ...], available: str, what: str) -> tuple[str, ...]:
    """A comma-separated list of distinct names from ``known``, lower-cased, in the given order."""
    names = tuple(p.strip().lower() for p in text.split(",") if p.strip())
    unknown = [n for n in names if n not in known]
    if not names or unknown:
        raise ConfigError(
            f"{flag} {text!r}: unknown {', '.join(unknown) or 'empty list'}; available: {available}."
        )
    if len(set(names)) != len(names):
        raise ConfigError(f"{flag} {text!r} repeats a {what}.")
    return names


def parse_compressions(text: str) -> tuple[str, ...]:
    """``"none,fp16"`` -> ("none", "fp16"): the MPI backend's wire compressions to measure."""
    return _parse_names(text, "--compression", COMPRESSIONS, ", ".join(COMPRESSIONS), "compression")


def parse_bucket_sizes(text: str) -> tuple[float | str, ...]:
    """``"0,4,auto"`` -> (0.0, 4.0, "auto"): bucket sizes in MB (0 = one sum after the backward pass, auto:
    measured from the first steps), distinct."""
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if not parts:
        raise ConfigError(f"--bucket-mb {text!r} is empty. Hint: a comma-separated list such as 0,4.")
    sizes = tuple(check_bucket_setting(p, "--bucket-mb") for p in parts)
    if len(set(sizes)) != len(sizes):
        raise ConfigError(f"--bucket-mb {text!r} repeats a size.")
    return sizes


def parse_backends(text: str) -> tuple[str, ...]:
    """``"tf,mpi"`` -> ("tf", "mpi"), each a known synchronisation backend."""
    return _parse_names(text, "--backend", BACKENDS, ", ".join(BACKENDS), "backend")


def parse_compare(text: str) -> tuple[str, ...]:
    """``"independent,raw-tf"`` -> the reference configurations; ``all`` -> every one, ``none`` -> ()."""
    lowered = text.strip().lower()
    if lowered == "all":
        return REFERENCES
    if lowered == "none":
        return ()
    return _parse_names(
        text, "--compare", REFERENCES, f"{', '.join(REFERENCES)}, all or none", "configuration"
    )


#: Warm-up steps by default, and across nodes where auto buckets decide (and trace again) in the warm-up.
WARMUP, WARMUP_AUTO = 10, 20


@dataclass(frozen=True)
class BenchConfig:
    """A benchmark grid (workers x replicas x backends), its lengths and where the results go."""

    out: str
    workload: str = "mnist-cnn"
    dataset: str = "synthetic"
    workers: tuple[int, ...] = (1, 2)
    replicas: tuple[int, ...] = (1,)
    backends: tuple[str, ...] = ("tf",)
    compare: tuple[str, ...] = ()
    steps: int = 50
    #: Steps before measuring as given; None: the default (:attr:`warmup_steps` is the number used).
    warmup: int | None = None
    repeats: int = 3
    batch_size_per_replica: int = 64
    threads: int | None = None
    diagnose: bool = False
    input_delay_ms: float = 0.0
    run_timeout: float = 600.0
    seed: int = 0
    #: Across nodes: their addresses in node order, the node counts to measure (each takes the first N), and
    #: the command prefix that runs a command on a node (``{host}`` replaced); ``workers`` are then per node.
    hosts: tuple[str, ...] = ()
    nodes: tuple[int, ...] = ()
    on_host: str = ""
    base_port: int = 29600
    #: Each node's processes on this many of its cores (None: every core it has): a stated core budget.
    cpus_per_host: int | None = None
    #: Every measured tfdist run also writes a Chrome trace per rank under its run directory.
    timeline: bool = False
    #: The MPI backend's variants: each compression x each bucket size (``()``: the default size).
    compression: tuple[str, ...] = ("none",)
    bucket_mb: tuple[float | str, ...] = ()

    def __post_init__(self) -> None:
        WorkerSpec.of(self, self.out).train_config()  # the workload and dataset checked where they are used
        self._check_nodes()
        if self.steps < 1:
            raise ConfigError(f"--steps={self.steps} must be at least 1 measured step.")
        if self.warmup_steps == 0 and self.steps < 2:
            raise ConfigError(
                "--warmup 0 --steps 1: the first step (tracing) is never timed; use --steps 2 or more."
            )
        if self.warmup_steps < 0:
            raise ConfigError(f"--warmup={self.warmup} must be 0 or more steps.")
        if self.repeats < 1:
            raise ConfigError(f"--repeats={self.repeats} must be at least 1.")
        if self.threads is not None and self.threads < 1:
            raise ConfigError(f"--threads={self.threads} must be at least 1 per worker.")
        if self.input_delay_ms < 0:
            raise ConfigError(f"--input-delay-ms={self.input_delay_ms} must be 0 or more.")
        programs = [c for c in self.compare if c != "independent"]
        if programs and ":" in self.dataset:
            raise ConfigError(
                f"--compare {','.join(programs)} with --dataset {self.dataset}: the reference programs train "
                "on in-memory datasets only. Hint: --dataset synthetic or digits, or --compare independent."
            )
        if self.cpus_per_host is not None and self.cpus_per_host < 1:
            raise ConfigError(f"--cpus-per-host={self.cpus_per_host} must be at least 1 core.")
        if self.run_timeout <= 0:
            raise ConfigError(f"--run-timeout={self.run_timeout} must be positive seconds.")
        self._check_wire()

    def _check_wire(self) -> None:
        for value in self.compression:
            check_compression(value, "--compression")
        for size in self.bucket_mb:
            check_bucket_setting(size, "--bucket-mb")
        varied = self.compression != ("none",) or self.bucket_mb
        if varied and "mpi" not in self.backends:
            raise ConfigError(
                "--compression/--bucket-mb vary the mpi backend, but --backend is "
                f"{','.join(self.backends)}. Hint: add mpi, e.g. --backend tf,mpi."
            )

    def _check_nodes(self) -> None:
        if not self.hosts:
            if self.nodes and self.nodes != (1,):
                raise ConfigError(
                    f"--nodes {','.join(map(str, self.nodes))} without --hosts: tfdist bench does not know "
                    "the nodes. Hint: --hosts n1,n2 (or run it inside a Slurm allocation: salloc -N 2 "
                    "tfdist bench --nodes 1,2)."
                )
            if self.on_host:
                raise ConfigError(f"--on-host {self.on_host!r} without --hosts. Hint: add --hosts n1,n2.")
            return
        check_hosts(self.hosts, "--hosts")
        if self.nodes and max(self.nodes) > len(self.hosts):
            raise ConfigError(
                f"--nodes {','.join(map(str, self.nodes))} asks for {max(self.nodes)} nodes but --hosts "
                f"names {len(self.hosts)} ({','.join(self.hosts)}). Hint: list more hosts or fewer nodes."
            )
        if self.on_host and "{host}" not in self.on_host:
            raise ConfigError(
                f"--on-host {self.on_host!r} has no {{host}}: every node would run the same command. "
                "Hint: e.g. --on-host 'ssh {host}'."
            )
        if not 1024 <= self.base_port <= MAX_PORT - 1000:
            raise ConfigError(
                f"--base-port={self.base_port} must be in 1024..{MAX_PORT - 1000} (runs rotate ports above "
                "it)."
            )

    @property
    def node_counts(self) -> tuple[int, ...]:
        """The node counts of the grid: ``--nodes``, else 1 and every host; (1,) on one machine."""
        if not self.hosts:
            return (1,)
        return self.nodes or tuple(sorted({1, len(self.hosts)}))

    @property
    def warmup_steps(self) -> int:
        """The steps run before measuring: ``warmup`` as given, else :data:`WARMUP_AUTO` when a run crosses
        nodes on the MPI backend with ``auto`` buckets, else :data:`WARMUP`."""
        if self.warmup is not None:
            return self.warmup
        across = any(n > 1 for n in self.node_counts)
        auto = not self.bucket_mb or "auto" in self.bucket_mb
        return WARMUP_AUTO if across and auto and "mpi" in self.backends else WARMUP

    @property
    def log_every(self) -> int:
        """Steps per timing block (results read at block ends); a block ends at the warm-up's end."""
        import math

        block = math.gcd(self.steps, 10)
        return math.gcd(block, self.warmup_steps) if self.warmup_steps else block


#: What one measured process does (:mod:`tfdist.bench.worker`).
WORKER_MODES = ("train", "compute", "input", "independent")


@dataclass(frozen=True)
class WorkerSpec:
    """What one measured process runs; handed to ``python -m tfdist.bench.worker`` as JSON."""

    mode: str
    workload: str
    dataset: str
    batch_size_per_replica: int
    warmup: int
    steps: int
    log_every: int
    seed: int
    input_delay_ms: float
    run_dir: str
    timeline: str = ""  # a directory for tfdist.fit's per-rank Chrome traces; "" = none

    def __post_init__(self) -> None:
        if self.mode not in WORKER_MODES:
            raise ConfigError(f"bench worker mode {self.mode!r} is not one of {', '.join(WORKER_MODES)}.")

    @classmethod
    def of(cls, config: BenchConfig, run_dir: str, mode: str = "train") -> WorkerSpec:
        """The worker spec of ``config``'s measured runs."""
        return cls(
            mode=mode,
            workload=config.workload,
            dataset=config.dataset,
            batch_size_per_replica=config.batch_size_per_replica,
            warmup=config.warmup_steps,
            steps=config.steps,
            log_every=config.log_every,
            seed=config.seed,
            input_delay_ms=config.input_delay_ms,
            run_dir=run_dir,
            timeline=f"{run_dir}/timeline" if config.timeline else "",
        )

    def train_config(self) -> TrainConfig:
        """The training options of the measured run."""
        return TrainConfig(
            workload=self.workload,
            dataset=self.dataset,
            epochs=1,
            batch_size_per_replica=self.batch_size_per_replica,
            lr=0.01,
            run_dir=self.run_dir,
            steps_per_epoch=self.warmup + self.steps,
            seed=self.seed,
        )

    def to_json(self) -> str:
        """This spec as one JSON argument."""
        return jsonconfig.to_json(self)

    @classmethod
    def from_json(cls, text: str) -> WorkerSpec:
        """The spec :meth:`to_json` wrote (checked again)."""
        return jsonconfig.from_json(cls, text, "bench worker spec")
