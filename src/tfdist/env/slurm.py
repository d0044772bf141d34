"""A task of a Slurm job step (``srun``): cluster spec from SLURM_* variables alone.

TensorFlow's SlurmClusterResolver calls ``nvidia-smi`` and fails on CPU-only nodes, so the spec is
resolved here from the step's variables; every task computes the same spec without talking to others.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Mapping
from itertools import accumulate

from tfdist import variables
from tfdist.env.base import ClusterEnvironment
from tfdist.errors import ConfigError
from tfdist.nodes import (
    check_ports,
    cuda_visible_devices,
    expand_nodelist,
    expand_tasks_per_node,
    parse_gpu_list,
)

#: Ports are derived as BASE + (job id mod SLOTS) * SLOT_WIDTH + local task index, so concurrent jobs
#: sharing a node almost never collide while all tasks of one job agree. TFDIST_PORT overrides the base.
PORT_BASE, PORT_SLOTS, PORT_SLOT_WIDTH = 20000, 1000, 40


def _int_var(environ: Mapping[str, str], name: str, minimum: int = 0) -> int:
    raw = environ.get(name, "")
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(
            f"{name}={raw!r} is not an integer. Hint: run the command inside an srun step."
        ) from None
    if value < minimum:
        raise ConfigError(f"{name}={value} is below {minimum}.")
    return value


def derive_base_port(environ: Mapping[str, str], max_tasks_per_node: int) -> int:
    """First port of this job's tasks on each node: TFDIST_PORT, else derived from SLURM_JOB_ID."""
    if variables.is_set("TFDIST_PORT", environ):
        base = int(variables.get("TFDIST_PORT", environ))
        source = f"TFDIST_PORT={base}"
    elif "SLURM_JOB_ID" in environ:
        job_id = _int_var(environ, "SLURM_JOB_ID")
        if max_tasks_per_node > PORT_SLOT_WIDTH:
            raise ConfigError(
                f"{max_tasks_per_node} tasks on one node exceed the {PORT_SLOT_WIDTH} ports tfdist derives "
                "per job. Hint: set TFDIST_PORT to a free base port."
            )
        base = PORT_BASE + (job_id % PORT_SLOTS) * PORT_SLOT_WIDTH
        source = f"SLURM_JOB_ID's base port {base}"
    else:
        raise ConfigError(
            "SLURM_JOB_ID is not set, so tasks cannot agree on ports. Hint: set TFDIST_PORT to a free "
            "base port."
        )
    return check_ports(base, max_tasks_per_node, source)


class SlurmEnvironment(ClusterEnvironment):
    """A task started by ``srun``: rank SLURM_PROCID of SLURM_STEP_NUM_TASKS (or SLURM_NTASKS)."""

    kind = "slurm"

    @classmethod
    def detect(cls, environ: Mapping[str, str]) -> SlurmEnvironment | None:
        """Detect an srun task (SLURM_PROCID and SLURM_STEP_NODELIST set); validate the step variables."""
        if "SLURM_PROCID" not in environ or "SLURM_STEP_NODELIST" not in environ:
            return None
        rank = _int_var(environ, "SLURM_PROCID")
        size_var = "SLURM_STEP_NUM_TASKS" if "SLURM_STEP_NUM_TASKS" in environ else "SLURM_NTASKS"
        world = _int_var(environ, size_var, 1)
        if rank >= world:
            raise ConfigError(
                f"SLURM_PROCID={rank} but {size_var}={world}; a rank must be below the number of tasks."
            )
        nodes = expand_nodelist(environ["SLURM_STEP_NODELIST"])
        tpn_var = (
            "SLURM_STEP_TASKS_PER_NODE" if "SLURM_STEP_TASKS_PER_NODE" in environ else "SLURM_TASKS_PER_NODE"
        )
        if tpn_var in environ:
            tasks = expand_tasks_per_node(environ[tpn_var], tpn_var)
        else:  # as srun spreads the tasks: the first nodes take one more
            base, extra = divmod(world, len(nodes))
            tasks = [base + (i < extra) for i in range(len(nodes))]
        if len(tasks) != len(nodes):
            raise ConfigError(
                f"{tpn_var}={environ.get(tpn_var)!r} gives {len(tasks)} node count(s) but "
                f"SLURM_STEP_NODELIST names {len(nodes)} node(s)."
            )
        if sum(tasks) != world:
            raise ConfigError(
                f"{tpn_var}={environ.get(tpn_var)!r} adds up to {sum(tasks)} tasks but {size_var}={world}."
            )
        ends = list(accumulate(tasks))
        node = bisect_right(ends, rank)  # the node of a rank: Slurm's block distribution fills node by node
        local_world = tasks[node]
        local_rank = (
            _int_var(environ, "SLURM_LOCALID")
            if "SLURM_LOCALID" in environ
            else rank - ends[node] + local_world
        )
        if local_rank >= local_world:
            raise ConfigError(f"SLURM_LOCALID={local_rank} but this node runs {local_world} task(s).")
        port = derive_base_port(environ, max(tasks))
        workers = [f"{n}:{port + j}" for n, count in zip(nodes, tasks, strict=True) for j in range(count)]
        gpu_ids, bound = _visible_gpus(environ)
        return cls(
            rank=rank,
            world_size=world,
            local_rank=local_rank,
            local_world_size=local_world,
            task_index=rank,
            cluster_spec={"worker": workers},
            gpu_ids=gpu_ids,
            gpus_bound_by_scheduler=bound,
            source=f"SLURM_JOB_ID={environ.get('SLURM_JOB_ID', '?')}",
        )


def _visible_gpus(environ: Mapping[str, str]) -> tuple[tuple[str, ...] | None, bool]:
    """GPUs this task may see, and whether Slurm already bound them per task (--gpus-per-task, --gpu-bind)."""
    bound = any(k in environ for k in ("SLURM_GPUS_PER_TASK", "SLURM_GPU_BIND"))
    gpus = cuda_visible_devices(environ)
    for name in ("SLURM_STEP_GPUS", "SLURM_JOB_GPUS"):
        if gpus is None and name in environ:
            gpus = parse_gpu_list(environ[name], name)
    return gpus, bound
