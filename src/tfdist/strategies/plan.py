"""Decide which tf.distribute strategy to build. Pure: no TensorFlow import, no side effects."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from tfdist import backends, variables
from tfdist.env.base import ClusterEnvironment, ClusterSpecDict
from tfdist.errors import ConfigError

KINDS = ("auto", "one_device", "mirrored", "multi_worker", "parameter_server", "tpu")
COMMUNICATIONS = ("auto", "ring", "nccl")
#: A stuck peer should fail the step in minutes, not hang for hours (TensorFlow's default is no limit).
DEFAULT_COLLECTIVE_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class LocalDevices:
    """What this process can compute on: TensorFlow's physical GPU names and usable CPU cores."""

    gpus: tuple[str, ...] = ()
    cpu_cores: int = 1


@dataclass(frozen=True)
class StrategyOptions:
    """The user's wishes, from ``tfdist.strategy(...)`` arguments or TFDIST_* variables."""

    kind: str = "auto"
    devices: tuple[int, ...] | None = None
    communication: str = "auto"
    collective_timeout: float | None = DEFAULT_COLLECTIVE_TIMEOUT_S
    memory_growth: bool = True
    memory_limit_mb: int | None = None
    cpu_replicas: int | None = None
    gpus_per_worker_all: bool = False
    backend: str = "auto"

    def __post_init__(self) -> None:
        backends.check_name(self.backend, "TFDIST_BACKEND")
        if self.kind not in KINDS:
            raise ConfigError(f"strategy kind {self.kind!r} is unknown; choose one of {', '.join(KINDS)}.")
        if self.communication not in COMMUNICATIONS:
            raise ConfigError(
                f"communication {self.communication!r} is unknown; choose one of {', '.join(COMMUNICATIONS)}."
            )
        if self.collective_timeout is not None and self.collective_timeout <= 0:
            raise ConfigError(
                f"collective_timeout={self.collective_timeout} must be positive seconds (or None for no "
                "limit)."
            )
        if self.cpu_replicas is not None and self.cpu_replicas < 1:
            raise ConfigError(f"cpu_replicas={self.cpu_replicas} must be at least 1.")
        if self.memory_limit_mb is not None and self.memory_limit_mb < 1:
            raise ConfigError(f"memory_limit_mb={self.memory_limit_mb} must be a positive number of MiB.")
        if self.devices is not None and (not self.devices or min(self.devices) < 0):
            raise ConfigError(f"devices={list(self.devices)} must be a non-empty list of GPU indices >= 0.")


@dataclass(frozen=True)
class StrategyPlan:
    """Everything :func:`tfdist.strategies.build.build_strategy` needs, decided in advance."""

    kind: str
    reason: str
    gpu_indices: tuple[int, ...] = ()
    cpu_replicas: int = 0
    communication: str = "auto"
    collective_timeout: float | None = DEFAULT_COLLECTIVE_TIMEOUT_S
    memory_growth: bool = True
    memory_limit_mb: int | None = None
    cluster_spec: ClusterSpecDict = field(default_factory=dict)
    task_type: str = "worker"
    task_index: int = 0
    tpu_name: str = ""
    backend: str = "tf"
    num_replicas: int = 1
    warnings: tuple[str, ...] = ()

    def describe(self) -> dict[str, object]:
        """A JSON-ready summary for ``tfdist env``."""
        return {
            "kind": self.kind,
            "backend": self.backend,
            "reason": self.reason,
            "num_replicas": self.num_replicas,
            "gpu_indices": list(self.gpu_indices),
            "cpu_replicas": self.cpu_replicas,
            "communication": self.communication,
            "collective_timeout_s": self.collective_timeout,
            "memory_growth": self.memory_growth,
            "warnings": list(self.warnings),
        }


def options_from_environ(environ: Mapping[str, str], **given: object) -> StrategyOptions:
    """Merge explicit arguments (``None`` = not given) over TFDIST_* variables over defaults
    (TFDIST_COLLECTIVE_TIMEOUT=0: no limit)."""
    values: dict[str, object] = {}
    if variables.is_set("TFDIST_STRATEGY", environ):
        values["kind"] = variables.get("TFDIST_STRATEGY", environ)
    if variables.is_set("TFDIST_COMMUNICATION", environ):
        values["communication"] = variables.get("TFDIST_COMMUNICATION", environ).lower()
    if variables.is_set("TFDIST_COLLECTIVE_TIMEOUT", environ):
        timeout = variables.get("TFDIST_COLLECTIVE_TIMEOUT", environ)
        values["collective_timeout"] = None if timeout == 0 else timeout
    if variables.is_set("TFDIST_CPU_REPLICAS", environ):
        values["cpu_replicas"] = variables.get("TFDIST_CPU_REPLICAS", environ)
    if variables.is_set("TFDIST_BACKEND", environ):
        values["backend"] = variables.get("TFDIST_BACKEND", environ).lower()
    if (variables.get("TFDIST_GPUS_PER_WORKER", environ) or "").lower() == "all":
        values["gpus_per_worker_all"] = True
    values.update({k: v for k, v in given.items() if v is not None})
    if values.get("devices") is not None:
        values["devices"] = tuple(values["devices"])  # type: ignore[arg-type]
    return StrategyOptions(**values)  # type: ignore[arg-type]


def plan_gpus(env: ClusterEnvironment, devices: LocalDevices, options: StrategyOptions) -> tuple[int, ...]:
    """Which of TensorFlow's visible GPUs this process uses: with several tasks on the node, the one at its
    local rank, unless the scheduler bound GPUs per task or the task drives every GPU of its node."""
    n = len(devices.gpus)
    if options.devices is not None:
        bad = [i for i in options.devices if i >= n]
        if bad:
            raise ConfigError(
                f"devices={list(options.devices)} asks for GPU {bad[0]} but this process sees {n} GPU(s). "
                "Hint: indices count from 0 over CUDA_VISIBLE_DEVICES."
            )
        return tuple(options.devices)
    if n == 0:
        return ()
    tasks_here = env.local_world_size
    if tasks_here <= 1 or env.gpus_bound_by_scheduler or options.gpus_per_worker_all:
        return tuple(range(n))
    if n < tasks_here:
        listed = (
            f"CUDA_VISIBLE_DEVICES gives {n} GPU(s)"
            if env.gpu_ids is not None
            else f"this node has {n} GPU(s)"
        )
        raise ConfigError(
            f"{listed} but {tasks_here} tasks run on this node; each task needs its own GPU. Hint: start "
            f"at most {n} task(s) per node, or set TFDIST_GPUS_PER_WORKER=all to share."
        )
    return (env.local_rank,)


def plan_strategy(
    env: ClusterEnvironment, devices: LocalDevices, options: StrategyOptions | None = None
) -> StrategyPlan:
    """Pick the strategy for this process and explain why (4 local GPUs: mirrored over all four)."""
    opts = options or StrategyOptions()
    gpus = plan_gpus(env, devices, opts)
    backend = backends.choose(opts.backend, source="TFDIST_BACKEND", under_mpi=env.kind == "mpi").name
    process_level = backend in backends.PROCESS_BACKENDS
    if process_level:
        kind, reason = _mpi_kind(env, opts)
    else:
        kind, reason = _choose_kind(env, gpus, opts)
        _check_kind(kind, env, gpus, opts)
    if kind in ("one_device", "tpu"):
        gpus = gpus[:1] if kind == "one_device" else ()
    if opts.communication == "nccl" and not gpus:
        raise ConfigError(
            "communication='nccl' needs GPUs but this process has none. Hint: use 'ring' or 'auto' on CPUs."
        )
    cpu_replicas = opts.cpu_replicas or 0
    local_replicas = cpu_replicas if cpu_replicas > 1 else max(1, len(gpus))
    warnings = list(env.warnings)
    if kind == "parameter_server":
        # Under MultiWorkerMirroredStrategy tfdist's Keras fix makes model.fit work; here Keras 3 has no path.
        warnings.append(
            "Keras 3 model.fit does not work under ParameterServerStrategy on TensorFlow 2.21; use "
            "tfdist.fit(model, data, ...)."
        )
    if opts.communication != "auto" and kind not in ("multi_worker", "mirrored"):
        warnings.append(f"communication={opts.communication!r} is ignored by the {kind} strategy.")
    return StrategyPlan(
        kind=kind,
        reason=reason,
        gpu_indices=gpus,
        cpu_replicas=cpu_replicas if cpu_replicas > 1 else 0,
        communication=opts.communication,
        collective_timeout=opts.collective_timeout,
        memory_growth=opts.memory_growth,
        memory_limit_mb=opts.memory_limit_mb,
        cluster_spec=env.cluster_spec,
        task_type=env.role,
        task_index=env.task_index,
        tpu_name=getattr(env, "tpu_name", ""),
        backend=backend,
        num_replicas=env.world_size if process_level else _num_replicas(kind, env, local_replicas),
        warnings=tuple(warnings),
    )


def _mpi_kind(env: ClusterEnvironment, opts: StrategyOptions) -> tuple[str, str]:
    """The MPI backend runs one local device per process; MPI all-reduces the gradients."""
    if opts.kind in ("multi_worker", "parameter_server", "tpu", "mirrored"):
        raise ConfigError(
            f"strategy {opts.kind!r} cannot be combined with the MPI backend, which syncs one device per "
            "process through MPI. Hint: drop kind= (or TFDIST_STRATEGY), or use TFDIST_BACKEND=tf."
        )
    if (opts.cpu_replicas or 0) > 1:
        raise ConfigError(
            f"cpu_replicas={opts.cpu_replicas} cannot be combined with the MPI backend (one device per "
            "process). Hint: start more ranks instead."
        )
    return "one_device", f"MPI backend: {env.world_size} rank(s) from {env.source}, one device each"


def _choose_kind(env: ClusterEnvironment, gpus: tuple[int, ...], opts: StrategyOptions) -> tuple[str, str]:
    where = f"{env.kind} environment ({env.source})"
    if opts.kind != "auto":
        return opts.kind, f"asked for explicitly; {where}"
    if env.kind == "tpu":
        return "tpu", f"TPU detected from {env.source}"
    if env.has_parameter_servers:
        return (
            "parameter_server",
            f"the cluster from {env.source} has {len(env.cluster_spec['ps'])} ps task(s)",
        )
    if env.world_size > 1:
        return "multi_worker", f"{env.world_size} workers in the {where}"
    if (opts.cpu_replicas or 0) > 1:
        return "mirrored", f"{opts.cpu_replicas} logical CPU replicas requested"
    if len(gpus) > 1:
        return "mirrored", f"{len(gpus)} local GPUs"
    if len(gpus) == 1:
        return "one_device", "one GPU"
    return "one_device", "no GPU and a single process"


def _check_kind(kind: str, env: ClusterEnvironment, gpus: tuple[int, ...], opts: StrategyOptions) -> None:
    """Reject an explicit kind that the environment cannot serve, with a hint."""
    cluster_hint = "Hint: start the workers with `tfdist launch -n N`, under srun, or set TF_CONFIG."
    replicas = opts.cpu_replicas or 0
    if kind in ("one_device", "mirrored") and env.is_distributed:
        raise ConfigError(
            f"strategy {kind!r} was asked for but the {env.kind} environment ({env.source}) has "
            f"{env.world_size} workers; each would train alone. Hint: use kind='auto' or 'multi_worker'."
        )
    if kind == "one_device" and replicas > 1:
        raise ConfigError(
            f"strategy 'one_device' was asked for with cpu_replicas={replicas}. Hint: use kind='mirrored' "
            "for several replicas."
        )
    if kind == "mirrored" and replicas < 2 and len(gpus) < 2:
        raise ConfigError(
            f"strategy 'mirrored' needs at least 2 devices but this process has {len(gpus)} GPU(s) and "
            f"cpu_replicas={opts.cpu_replicas}. Hint: set cpu_replicas=N (or TFDIST_CPU_REPLICAS) to "
            "mirror over logical CPUs, or use kind='auto'."
        )
    if kind == "multi_worker":
        if env.kind not in ("tf_config", "slurm"):
            raise ConfigError(
                f"strategy 'multi_worker' needs a cluster but the environment is {env.kind} "
                f"({env.source}). {cluster_hint}"
            )
        if env.has_parameter_servers:
            raise ConfigError(
                "strategy 'multi_worker' was asked for but the cluster has ps tasks. Hint: use "
                "kind='parameter_server' or drop the ps tasks."
            )
        if replicas > 1:
            raise ConfigError(
                f"cpu_replicas={replicas} cannot be combined with 'multi_worker' (one CPU device per "
                "worker). Hint: unset TFDIST_CPU_REPLICAS and start more workers."
            )
    if kind == "parameter_server" and not env.has_parameter_servers:
        raise ConfigError(
            f"strategy 'parameter_server' needs ps tasks in the cluster but the {env.kind} environment has "
            'none. Hint: `tfdist launch --ps 1 -n 2 ...` or add "ps" to TF_CONFIG.'
        )
    if kind == "tpu" and env.kind != "tpu":
        raise ConfigError(
            f"strategy 'tpu' was asked for but no TPU is detected (environment: {env.kind}). Hint: set "
            "TPU_NAME or run on a TPU VM."
        )


def _num_replicas(kind: str, env: ClusterEnvironment, local_replicas: int) -> int:
    if kind == "multi_worker":
        return env.world_size * local_replicas
    if kind == "parameter_server":
        return len(env.cluster_spec.get("worker", []))
    if kind == "tpu":
        return 0  # known only once the TPU system is initialised
    return local_replicas
