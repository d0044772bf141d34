"""Workers placed by Ray: bundles, whether the cluster can hold them, and each worker's environment. Pure.

``tfdist launch --ray`` changes only where the processes run: one placement-group bundle per worker, with
its node's address and a port free there in ``TF_CONFIG`` (:mod:`tfdist.launcher.ray.placement` asks Ray).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tfdist.launcher.config import LaunchConfig
from tfdist.launcher.plan import ProcessSpec, TaskSlot, launcher_env, thread_env, worker_argv
from tfdist.worker.contract import RunFiles, TaskSpec, task_env

#: ``--ray-strategy`` values and the placement-group strategy Ray calls them.
RAY_STRATEGIES = {"pack": "PACK", "spread": "SPREAD", "strict-spread": "STRICT_SPREAD"}
RAY_INSTALL_HINT = "Hint: pip install 'tfdist[ray]' (Ray 2.60), then start or join a cluster with ray start."


@dataclass(frozen=True)
class NodeResources:
    """One alive Ray node: its address and the CPUs and GPUs it has in all."""

    address: str
    cpus: float
    gpus: float


@dataclass(frozen=True)
class Placement:
    """Where Ray put one worker: the node's address, a port free there, and the node's identity."""

    address: str
    port: int
    node_id: str


def bundle(config: LaunchConfig) -> dict[str, float]:
    """The resources of one worker's bundle.

    Input/Output: ``ray_cpus=1`` -> ``{"CPU": 1.0}``; ``ray_gpus=1`` -> ``{"CPU": 1.0, "GPU": 1.0}``.
    """
    out = {"CPU": float(config.ray_cpus)}
    if config.ray_gpus:
        out["GPU"] = float(config.ray_gpus)
    return out


def _fits(node: NodeResources, need: Mapping[str, float]) -> int:
    """How many bundles ``need`` fit on ``node`` at once."""
    have = {"CPU": node.cpus, "GPU": node.gpus}
    return min((int(have[name] // need[name] + 1e-9) for name in have if need.get(name)), default=1 << 30)


def shortfall(config: LaunchConfig, nodes: Sequence[NodeResources], address: str) -> str | None:
    """Why the cluster can never hold the job's bundles (one line), or None: checked before a placement
    group exists, so a job that cannot be placed never waits in "pending".

    Input/Output: ``-n 5`` of ``{"CPU": 1}`` on two 2-CPU nodes ->
    ``"-n 5 workers need 5 CPU (1 per worker) but the Ray cluster at ... has 4 CPU on 2 node(s). ..."``.
    """
    n, need = config.nproc_per_node, bundle(config)
    where = f"the Ray cluster at {address}"
    for name, per in need.items():
        total = sum(node.cpus if name == "CPU" else node.gpus for node in nodes)
        if per * n > total + 1e-9:
            return (
                f"-n {n} workers need {per * n:g} {name} ({per:g} per worker) but {where} has {total:g} "
                f"{name} on {len(nodes)} node(s). Hint: fewer workers, "
                + ("--ray-gpus 0 (CPU workers), " if name == "GPU" else "")
                + "or more nodes (ray start --address=... on another machine)."
            )
    fits = [_fits(node, need) for node in nodes]
    if config.ray_strategy == "strict-spread":
        hosts = sum(1 for f in fits if f >= 1)
        if hosts < n:
            return (
                f"--ray-strategy strict-spread puts each of the -n {n} workers on its own node but only "
                f"{hosts} node(s) of {where} can hold a worker's {_text(need)}. Hint: --ray-strategy spread."
            )
    elif sum(fits) < n:
        return (
            f"-n {n} workers of {_text(need)} each do not fit on the nodes of {where}: at most {sum(fits)} "
            "fit (a worker's bundle must fit on one node). Hint: fewer workers or smaller bundles."
        )
    return None


def _text(need: Mapping[str, float]) -> str:
    return " + ".join(f"{amount:g} {name}" for name, amount in need.items())


def plan_ray_workers(
    config: LaunchConfig,
    placements: Sequence[Placement],
    *,
    run_dir: str,
    attempt: int,
    base_env: Mapping[str, str],
) -> list[ProcessSpec]:
    """Every worker of one attempt, placed in the Ray job: a one-worker node's environment (no CPU binding:
    the cores are Ray's to share), its place in the whole job, and its bundle's GPUs as Ray set them."""
    world = len(placements)
    cluster = {"worker": [f"{_host(p.address)}:{p.port}" for p in placements]}
    files = RunFiles(run_dir).attempt(attempt)
    threads = thread_env(max(1, int(config.ray_cpus)), 1) if config.cpu else None
    env = launcher_env(config, base_env, threads)
    env.pop("TFDIST_GPUS_PER_WORKER", None)  # the bundle decides, not the launching shell
    specs: list[ProcessSpec] = []
    for index, place in enumerate(placements):
        local = [i for i, p in enumerate(placements) if p.node_id == place.node_id]
        task = TaskSpec(
            world_size=world,
            rank=index,
            local_rank=local.index(index),
            local_world_size=len(local),
            index=index,
            cluster=cluster,
            run_dir=run_dir,
            attempt=attempt,
            gpus="" if config.cpu else None,
            all_gpus=config.ray_gpus > 1,
        )
        slot = TaskSlot("worker", index, index, 0)
        argv = worker_argv(config, slot)
        specs.append(ProcessSpec(slot, argv, task_env(task, env), files.log("worker", index), ()))
    return specs


def _host(address: str) -> str:
    return f"[{address}]" if ":" in address else address  # IPv6 in brackets, as TF_CONFIG wants
