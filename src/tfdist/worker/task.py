"""``tfdist run -- CMD``: make one task of a cluster job (an ``srun`` task, typically) a worker of ONE job,
then exec ``CMD``. In a Slurm step of a job ``tfdist slurm submit`` wrote, the wrapper stays as the parent,
so the job ends with the exit code of the task that failed FIRST (srun reports the highest: the stop's 143).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
from collections.abc import Mapping, Sequence

from tfdist import variables
from tfdist.env.base import ClusterEnvironment
from tfdist.errors import ConfigError
from tfdist.mpi.stack import has_mpich_wheel, pmi1_safe_netmod
from tfdist.nodes import gpu_count, loopback_peers, split_address
from tfdist.worker.contract import RunFiles, TaskSpec, task_env


def plan_task_env(env: ClusterEnvironment, environ: Mapping[str, str], node_gpus: int = 0) -> dict[str, str]:
    """The environment the task's command runs with: :func:`tfdist.worker.contract.task_env` for the task
    the scheduler describes (``TF_CONFIG`` unless set; one GPU per task by local rank when tasks share a
    node's GPUs, unless ``TFDIST_GPUS_PER_WORKER=all`` or the scheduler bound them).

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
    hosts = [split_address(address)[0] for tasks in env.cluster_spec.values() for address in tasks]
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


def run_task(command: Sequence[str], environ: Mapping[str, str] | None = None) -> int:
    """Run ``command`` as a worker of the job: exec it, or (see the module) run it as a child."""
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
    record = first_failure_record(base)
    if record is None:
        os.execve(program, list(command), env)
    return _run_child(program, command, env, record)


def first_failure_record(environ: Mapping[str, str]) -> str | None:
    """Where this Slurm step's first failure is recorded; ``None`` outside such a step."""
    run_dir = variables.raw("TFDIST_RUN_DIR", environ)
    job, step = environ.get("SLURM_JOB_ID"), environ.get("SLURM_STEP_ID")
    if not run_dir or not job or step is None:
        return None
    return RunFiles(run_dir).first_failure(f"{job}.{step}-r{environ.get('SLURM_RESTART_COUNT', '0')}")


#: Slurm signals every process of a step, so the wrapper forwards nothing: it notes a stop and survives
#: USR1/USR2 (a preemption handler's), which by default would end it before the command checkpointed.
_STOPS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
_NOTED = (*_STOPS, signal.SIGUSR1, signal.SIGUSR2)


def _run_child(program: str, command: Sequence[str], env: Mapping[str, str], record: str) -> int:
    stopped: list[int] = []

    def note(signum: int, _frame: object) -> None:
        if signum in _STOPS:
            stopped.append(signum)

    for signum in _NOTED:
        signal.signal(signum, note)  # a handler, not SIG_IGN: handlers reset to default in the child
    # Every descriptor stays open, as across an exec: srun's PMI plugins hand the task PMI_FD.
    child = subprocess.Popen([program, *command[1:]], executable=program, env=dict(env), close_fds=False)
    code = child.wait()
    code = 128 - code if code < 0 else code
    return 0 if code == 0 else step_exit_code(record, code, failed_first=not stopped)


def step_exit_code(record: str, code: int, failed_first: bool) -> int:
    """The exit code this task reports: its own if it is the first of the step to fail (recorded for the
    others), else the first failure's; a stopped task with no failure recorded (scancel) keeps its own.

    Input/Output: task 1 exits 3 with no record -> 3 (recorded); task 0, stopped (143) -> 3.
    """
    if failed_first:
        directory = os.path.dirname(record) or "."
        with contextlib.suppress(OSError):
            fd, temp = tempfile.mkstemp(dir=directory, prefix=".first-failure-")
            with os.fdopen(fd, "w") as out:
                out.write(f"{code}\n")
            try:
                os.link(temp, record)  # atomic, and fails if another task recorded first (NFS too)
                return code
            except FileExistsError:
                pass
            finally:
                os.unlink(temp)
    try:
        with open(record) as recorded:
            return int(recorded.read().strip())
    except (OSError, ValueError):
        return code
