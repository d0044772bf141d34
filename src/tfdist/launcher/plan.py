"""Who runs where, on which port, with which environment. Pure: the actor supplies ports and device counts."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tfdist.errors import ConfigError
from tfdist.launcher.config import LaunchConfig
from tfdist.mpi import hydra, stack
from tfdist.worker.contract import RunFiles, TaskSpec, task_env

LOOPBACK = "127.0.0.1"
#: Multi-node default: every node must derive the same ports without talking, so they are fixed.
DEFAULT_BASE_PORT = 29400


@dataclass(frozen=True)
class TaskSlot:
    """One process of the job: its role, index within the role, node and position on that node."""

    role: str
    index: int
    node: int
    position: int

    @property
    def name(self) -> str:
        """Short label for log prefixes: ``chief``, ``w1``, ``ps0``, ``mpi`` (the MPI launcher)."""
        if self.role in ("chief", "mpi"):
            return self.role
        return f"{'w' if self.role == 'worker' else self.role}{self.index}"


@dataclass(frozen=True)
class ProcessSpec:
    """Everything needed to start one local process: a worker, a parameter server or the MPI launcher."""

    slot: TaskSlot
    argv: tuple[str, ...]
    env: dict[str, str]
    log_path: str
    cpus: tuple[int, ...] = ()  # CPU ids the process is bound to; empty: not bound
    label: str = ""  # another name than the slot's, for reports and log prefixes
    stdin: bytes | None = None  # sent on its standard input, which stays open until the group stops it
    console_prefix: str | None = None  # the prefix of its console lines when not ``[name]: ``

    @property
    def name(self) -> str:
        """The slot's short label (or the given one)."""
        return self.label or self.slot.name


def plan_slots(config: LaunchConfig) -> list[TaskSlot]:
    """Every task of every node, in a fixed order all nodes agree on: per node the chief (node 0 only),
    the workers, the parameter servers. Input/Output: nnodes=1, nproc_per_node=2, ps=1 -> chief, w0, w1, ps0.
    """
    slots: list[TaskSlot] = []
    for node in range(config.nnodes):
        roles = [("chief", 0)] if node == 0 and config.uses_chief else []
        roles += [("worker", node * config.nproc_per_node + j) for j in range(config.nproc_per_node)]
        roles += [("ps", node * config.ps + j) for j in range(config.ps)]
        slots += [TaskSlot(role, index, node, position) for position, (role, index) in enumerate(roles)]
    return slots


def cluster_spec(
    config: LaunchConfig, slots: Sequence[TaskSlot], local_ports: Sequence[int] | None
) -> dict[str, list[str]]:
    """TensorFlow cluster spec. Single node without ``base_port``: loopback with the given free ports;
    otherwise ``hosts[node]:base_port+position`` so every node derives the same spec."""
    spec: dict[str, list[str]] = {}
    for slot in slots:
        if config.nnodes == 1 and config.base_port is None:
            if local_ports is None or len(local_ports) <= slot.position:
                raise ValueError("single-node launch needs one free port per task")
            address = f"{LOOPBACK}:{local_ports[slot.position]}"
        elif config.node_ports:  # agreed at a rendezvous: each node's own free ports
            address = f"{config.hosts[slot.node]}:{config.node_ports[slot.node][slot.position]}"
        else:
            host = config.hosts[slot.node] if config.hosts else LOOPBACK
            address = f"{host}:{(config.base_port or DEFAULT_BASE_PORT) + slot.position}"
        spec.setdefault(slot.role, []).append(address)
    return spec


def gpu_assignment(config: LaunchConfig, local_training: int, visible: Sequence[str]) -> list[str | None]:
    """CUDA_VISIBLE_DEVICES per local training task (``None`` = leave unchanged).

    Input/Output: 2 tasks, GPUs ("0", "1", "2") -> ["0", "1"]; ``--cpu`` -> ["", ""].
    """
    if config.cpu:
        return [""] * local_training
    if not visible or config.gpus_per_worker == "all":
        return [None] * local_training
    if len(visible) < local_training:
        raise ConfigError(
            f"{local_training} workers on this node but only {len(visible)} GPU(s) visible "
            f"({','.join(visible)}). Hint: -n {len(visible)}, --gpus-per-worker all, or --cpu."
        )
    return list(visible[:local_training])


def thread_env(cores: int, local_training: int, min_inter_op: int = 1) -> dict[str, str]:
    """An equal share of the cores per CPU worker; a parameter-server job needs ``min_inter_op`` threads."""
    share = max(1, cores // max(1, local_training))
    return {
        "TF_NUM_INTRAOP_THREADS": str(share),
        "TF_NUM_INTEROP_THREADS": str(max(share, min_inter_op)),
        "OMP_NUM_THREADS": str(share),
    }


def cpu_sets(bind: str, workers: int, cpu_ids: Sequence[int], cpu_training: bool) -> list[tuple[int, ...]]:
    """Contiguous, disjoint CPU sets, one per training worker of this node; ``[]`` for no binding (``auto``
    binds only CPU training whose workers fit the cores).

    Input/Output: ``("auto", 2, [0, 1, 2, 3], True)`` -> ``[(0, 1), (2, 3)]``.
    """
    if bind == "none" or workers < 1:
        return []
    if workers > len(cpu_ids):
        if bind == "core":
            raise ConfigError(
                f"--bind-to core: {workers} workers on this node but only {len(cpu_ids)} CPU core(s) "
                "available to it. Hint: start at most one worker per core, or use --bind-to none."
            )
        return []
    if bind == "auto" and not cpu_training:
        return []
    share = len(cpu_ids) // workers
    return [tuple(cpu_ids[i * share : (i + 1) * share]) for i in range(workers)]


def with_thread_defaults(env: dict[str, str], user: Mapping[str, str], defaults: Mapping[str, str]) -> None:
    """Add the planned thread counts to ``env`` unless the user set them (the inter-op minimum holds)."""
    for key, value in defaults.items():
        if key not in user:
            env[key] = value
    minimum = int(defaults.get("TF_NUM_INTEROP_THREADS", "1"))
    current = env.get("TF_NUM_INTEROP_THREADS", "")
    if current.isdigit() and int(current) < minimum:
        env["TF_NUM_INTEROP_THREADS"] = str(minimum)


def _rank(slot: TaskSlot, has_chief: bool) -> int:
    if slot.role == "chief":
        return 0
    if slot.role == "worker":
        return slot.index + (1 if has_chief else 0)
    return -1


def launcher_env(
    config: LaunchConfig,
    base_env: Mapping[str, str],
    threads: Mapping[str, str] | None = None,
    defaults: Mapping[str, str] | None = None,
    collective_timeout: bool = True,
) -> dict[str, str]:
    """What the launcher adds to ``base_env`` for every process before :func:`task_env` places it: the
    ``defaults`` and log level unless set, ``--env``, unbuffered output, the collective timeout, ``threads``.

    Input/Output: ``--cpu --watchdog-timeout 30``, base ``{}``, threads ``{"OMP_NUM_THREADS": "2"}`` ->
    ``{"TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONUNBUFFERED": "1", "TFDIST_COLLECTIVE_TIMEOUT": "30",
    "OMP_NUM_THREADS": "2"}``.
    """
    env = {**(defaults or {}), **base_env}
    # TensorFlow's C++ INFO lines from N workers drown the output; users can still set 0 themselves.
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env.update(config.extra_env)
    env["PYTHONUNBUFFERED"] = "1"
    if collective_timeout and config.watchdog_timeout and "TFDIST_COLLECTIVE_TIMEOUT" not in env:
        # A collective stuck longer than the watchdog would be killed anyway: let TensorFlow fail first.
        env["TFDIST_COLLECTIVE_TIMEOUT"] = str(config.watchdog_timeout)
    if threads is not None:
        with_thread_defaults(env, {**base_env, **config.extra_env}, threads)
    return env


def plan_workers(
    config: LaunchConfig,
    *,
    local_ports: Sequence[int] | None,
    visible_gpus: Sequence[str],
    cores: int,
    run_dir: str,
    attempt: int,
    base_env: Mapping[str, str],
    cpu_ids: Sequence[int] = (),
) -> list[ProcessSpec]:
    """The processes this node starts for one attempt, each with argv, environment and log file."""
    slots = plan_slots(config)
    spec = cluster_spec(config, slots, local_ports)
    local = [s for s in slots if s.node == config.node_rank]
    training = [s for s in local if s.role in ("chief", "worker")]
    gpus = gpu_assignment(config, len(training), visible_gpus)
    cpu_training = config.cpu or not visible_gpus
    binding = cpu_sets(config.bind, len(training), cpu_ids, cpu_training) if not config.ps else []
    world = len(spec.get("chief", [])) + len(spec.get("worker", []))
    files = RunFiles(run_dir).attempt(attempt)
    n_workers = len(spec.get("worker", []))
    threads = thread_env(cores, len(training), n_workers + 1 if config.ps else 1) if config.cpu else None
    out: list[ProcessSpec] = []
    for slot in local:
        local_rank = training.index(slot) if slot in training else -1
        env = launcher_env(config, base_env, threads)
        if config.ps and not config.cpu and "TF_NUM_INTEROP_THREADS" not in env:
            env["TF_NUM_INTEROP_THREADS"] = str(max(cores, n_workers + 1))
        task = TaskSpec(
            world_size=world,
            rank=_rank(slot, config.uses_chief),
            local_rank=local_rank,
            local_world_size=len(training),
            role=slot.role,
            index=slot.index,
            cluster=spec,
            run_dir=run_dir,
            attempt=attempt,
            gpus="" if slot.role == "ps" else gpus[local_rank],
            all_gpus=config.gpus_per_worker == "all",
        )
        cpus = binding[local_rank] if binding and local_rank >= 0 else ()
        out.append(
            ProcessSpec(
                slot, worker_argv(config, slot), task_env(task, env), files.log(slot.role, slot.index), cpus
            )
        )
    return out


def worker_argv(config: LaunchConfig, slot: TaskSlot) -> tuple[str, ...]:
    """The command of a worker or parameter server: the user's program under ``config.python``."""
    if config.uses_chief and config.ps and slot.role in ("worker", "ps"):
        # Parameter-server jobs: only the chief runs the user's program; the others serve its variables.
        return (config.python, "-u", "-m", "tfdist.launcher.ps_server")
    return config.command if config.no_python else (config.python, "-u", *config.command)


def plan_mpi(
    config: LaunchConfig,
    *,
    mpiexec: str,
    cores: int,
    run_dir: str,
    attempt: int,
    base_env: Mapping[str, str],
    flavour: str = "unknown",
    cpu_ids: Sequence[int] = (),
    visible_gpus: Sequence[str] = (),
    proxy: Sequence[str] = (),
) -> list[ProcessSpec]:
    """One process, the MPI launcher, starting the ranks of the command; on several nodes node 0 runs it
    for every node's ranks and each node runs ``proxy``, the Hydra proxy that starts its own."""
    files = RunFiles(run_dir).attempt(attempt)
    threads = thread_env(cores, config.nproc_per_node) if config.cpu else None
    env = launcher_env(config, base_env, threads, defaults=stack.YIELD_ENV, collective_timeout=False)
    # One process for every rank of this node: the MPI launcher gives each its rank.
    task = TaskSpec(
        world_size=config.nproc_per_node * config.nnodes,
        rank=None,
        role="mpi",
        run_dir=run_dir,
        attempt=attempt,
        gpus="" if config.cpu else None,
        backend=config.backend,
    )
    # The runner turns a rank's uncaught exception or non-zero exit into MPI_Abort (no rank waits forever).
    runner = (config.python, "-u", "-m", "tfdist.worker.mpirun")
    program = config.command if config.no_python else (*runner, *config.command)
    binding = cpu_sets(config.bind, config.nproc_per_node, cpu_ids, config.cpu or not visible_gpus)
    bind_args = stack.bind_args(flavour, binding, config.nnodes)
    nodes = hydra.manual_args(config.hosts, config.nproc_per_node) if config.nnodes > 1 else ()
    argv = (
        mpiexec,
        *nodes,
        *bind_args,
        *stack.RANK_PREFIX.get(flavour, ()),
        "-n",
        str(config.nproc_per_node * config.nnodes),
        *program,
    )
    launcher = TaskSlot("mpi", 0, 0, 0)
    if config.nnodes == 1:
        return [ProcessSpec(launcher, argv, task_env(task, env), files.log("mpi"))]
    env.update(hydra.control_env(mpi_control_port(config)))
    proxy_slot = TaskSlot("proxy", config.node_rank, config.node_rank, 1)
    own = ProcessSpec(proxy_slot, tuple(proxy), dict(base_env), files.log("proxy", config.node_rank))
    if config.node_rank != 0:
        return [own]
    return [ProcessSpec(launcher, argv, task_env(task, env), files.log("mpi")), own]


def mpi_control_port(config: LaunchConfig) -> int:
    """The port node 0's MPI launcher serves the proxies on: the first agreed port, else ``--base-port``."""
    return config.node_ports[0][0] if config.node_ports else config.base_port or DEFAULT_BASE_PORT
