"""``tfdist run -- CMD``: make one task of a cluster job (an ``srun`` task, typically) a worker of ONE
job, then become ``CMD``.

The task's environment is derived from the scheduler (pure: :func:`plan_task_env`) and the command is
exec'd (:func:`exec_task`), so the wrapper leaves no process of its own behind and adds no time to the
first step: it imports neither TensorFlow nor Keras.
"""

from __future__ import annotations

import os
import shutil
import socket
from collections.abc import Mapping, Sequence

from tfdist import variables
from tfdist.env.base import ClusterEnvironment
from tfdist.env.mpich import has_mpich_wheel, pmi1_safe_netmod
from tfdist.errors import ConfigError
from tfdist.nodes import gpu_count, loopback_peers
from tfdist.worker.contract import TaskSpec, task_env


def plan_task_env(env: ClusterEnvironment, environ: Mapping[str, str], node_gpus: int = 0) -> dict[str, str]:
    """The environment the task's command runs with: the worker contract
    (:func:`tfdist.worker.contract.task_env`) for the task the scheduler describes.

    - ``TF_CONFIG`` from the cluster spec (the ports every task derives from the job id), unless set;
    - ``TFDIST_RANK``, ``TFDIST_LOCAL_RANK``, ``TFDIST_WORLD_SIZE``, ``TFDIST_LOCAL_WORLD_SIZE``,
      ``TFDIST_ROLE``;
    - one GPU per task by local rank when several tasks share a node's GPUs (not with
      ``TFDIST_GPUS_PER_WORKER=all``, nor when the scheduler already bound GPUs to the task);
    - tfdist's worker bootstrap (the Keras ``model.fit`` fix) on ``PYTHONPATH``.

    Input/Output: rank 1 of a 2-task Slurm step -> ``TF_CONFIG`` with ``{"type": "worker", "index": 1}``.
    """
    own_tf_config = "TF_CONFIG" in environ or not env.is_distributed
    task = TaskSpec(
        world_size=env.world_size,
        rank=env.rank,
        local_rank=env.local_rank,
        local_world_size=env.local_world_size,
        role=env.role,
        index=env.task_index,
        cluster=None if own_tf_config else env.cluster_spec,
        gpus=_task_gpu(env, environ, node_gpus),
    )
    return task_env(task, environ)


def _task_gpu(env: ClusterEnvironment, environ: Mapping[str, str], node_gpus: int) -> str | None:
    if env.local_world_size < 2 or env.gpus_bound_by_scheduler:
        return None
    if (variables.raw("TFDIST_GPUS_PER_WORKER", environ) or "").strip().lower() == "all":
        return None
    visible = list(env.gpu_ids) if env.gpu_ids is not None else [str(i) for i in range(node_gpus)]
    if not visible:
        return None
    if len(visible) < env.local_world_size:
        raise ConfigError(
            f"{env.local_world_size} tasks on this node share {len(visible)} GPU(s) ({','.join(visible)}). "
            "Hint: one task per GPU (--ntasks-per-node = GPUs per node), or --per-node mirrored."
        )
    return visible[env.local_rank]


def check_peer_addresses(env: ClusterEnvironment, environ: Mapping[str, str]) -> None:
    """ConfigError naming the node and the fix when a peer node's name resolves to loopback here."""
    hosts = [address.rpartition(":")[0] for tasks in env.cluster_spec.values() for address in tasks]
    own = environ.get("SLURMD_NODENAME") or socket.gethostname()
    if len(set(hosts)) < 2:
        return
    bad = loopback_peers(own, hosts)
    if bad:
        host, address = bad[0]
        raise ConfigError(
            f"node {host!r}, another node of this job, resolves to {address} (loopback) on {own}, so this "
            f"task cannot reach it. Hint: map {host} to its network address in /etc/hosts on {own} (or fix "
            "DNS), then resubmit."
        )


def exec_task(command: Sequence[str], environ: Mapping[str, str] | None = None) -> None:
    """Replace this process with ``command`` run as a worker of the job (never returns)."""
    from tfdist.env import detect_environment

    if not command:
        raise ConfigError("no command to run. Hint: tfdist run -- python train.py [args...]")
    program = shutil.which(command[0])
    if program is None:
        raise ConfigError(
            f"command {command[0]!r} not found on PATH. Hint: give its full path, or activate the "
            "environment that provides it before tfdist run."
        )
    base = dict(os.environ if environ is None else environ)
    cluster = detect_environment(base)
    check_peer_addresses(cluster, base)
    env = plan_task_env(cluster, base, gpu_count())
    env.update(pmi1_safe_netmod(base, has_mpich_wheel()))
    os.execve(program, list(command), env)
