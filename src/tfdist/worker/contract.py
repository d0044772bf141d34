"""The worker contract, pure: every source of workers describes a task as a :class:`TaskSpec` and gets its
environment from ONE function, :func:`task_env`; :class:`RunFiles` and :class:`AttemptFiles` name the run
directory's files; :func:`forwarded_env` decides what travels to another host (``-H``, ``--ray``)."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tfdist.worker import BOOT_MARK, with_bootstrap

#: The variables that place one task in its job: written for each task, never sent to another host.
TASK_KEYS = (
    "TF_CONFIG",
    "TFDIST_RANK",
    "TFDIST_LOCAL_RANK",
    "TFDIST_WORLD_SIZE",
    "TFDIST_LOCAL_WORLD_SIZE",
    "TFDIST_ROLE",
    "TFDIST_RUN_DIR",
    "TFDIST_ATTEMPT_DIR",
    "TFDIST_RESTART_COUNT",
    "TFDIST_HEARTBEAT_FILE",
)


@dataclass(frozen=True)
class AttemptFiles:
    """The files of one attempt's directory (``<run>/attempt-K/``), named once."""

    directory: str

    @staticmethod
    def stem(role: str, index: int = 0) -> str:
        """A process's file stem: ``("worker", 1)`` -> ``"worker1"``; ``("mpi", 0)`` -> ``"mpi"``."""
        return role if role == "mpi" else f"{role}{index}"

    def log(self, role: str, index: int = 0) -> str:
        """A launched process's log file."""
        return os.path.join(self.directory, f"{self.stem(role, index)}.log")

    def heartbeat(self, role: str, index: int = 0) -> str:
        """The file the process's training loop touches for the watchdog."""
        return os.path.join(self.directory, f"{self.stem(role, index)}.heartbeat")

    def rank_log(self, rank: int | str) -> str:
        """Rank ``rank``'s lines of the MPI launcher's output."""
        return os.path.join(self.directory, f"rank{rank}.log")

    @property
    def ended(self) -> str:
        """``ended.json``: the launcher's record of how the attempt ended on this node."""
        return os.path.join(self.directory, "ended.json")

    def stacks(self, rank: int | str) -> str:
        """Rank ``rank``'s Python stacks, written when the launcher asks (a hang's report)."""
        return os.path.join(self.directory, f"rank{rank}.stacks.txt")

    @property
    def stacks_request(self) -> str:
        """``stacks.request``: the launcher asks every worker of the attempt for its stacks."""
        return os.path.join(self.directory, "stacks.request")

    @property
    def resize_request(self) -> str:
        """``resize.request``: the launcher asks every worker to stop at the next step boundary."""
        return os.path.join(self.directory, "resize.request")

    @staticmethod
    def record_name(kind: str, rank: int | str) -> str:
        """A worker's record for the launcher. Input/Output: ``("error", 1)`` -> ``"rank1.error.json"``."""
        return f"rank{rank}.{kind}.json"

    @staticmethod
    def unranked_record_name(kind: str, pid: int) -> str:
        """The record of a process that knows no rank: ``("error", 42)`` -> ``"pid42.error.json"``."""
        return f"pid{pid}.{kind}.json"

    def record(self, kind: str, rank: int | str) -> str:
        """The path of rank ``rank``'s record of ``kind`` (``"strategy"``, ``"error"``)."""
        return os.path.join(self.directory, self.record_name(kind, rank))

    @staticmethod
    def record_owner(name: str, kind: str) -> str | None:
        """Who wrote the record file ``name`` of ``kind``: its rank, else its stem; None for another file.

        Input/Output: ``("rank1.error.json", "error")`` -> ``"1"``; ``("pid42.error.json", "error")`` ->
        ``"pid42"``; ``("rank1.log", "error")`` -> None.
        """
        suffix = f".{kind}.json"
        if not name.endswith(suffix) or name.startswith("."):
            return None
        stem = name[: -len(suffix)]
        return stem.removeprefix("rank") if stem.startswith("rank") else stem


#: Records a worker writes for the launcher, by kind.
RECORD_KINDS = ("strategy", "error", "progress")


class _Name:
    """A name in a run directory: its path on a :class:`RunFiles`, the bare name on the class."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __get__(self, files: RunFiles | None, owner: type) -> str:
        return self.name if files is None else files.join(self.name)


@dataclass(frozen=True)
class RunFiles:
    """A run directory (``--run-dir``) and every name a command writes in it (``tfdist.fit``'s own two are
    named in :mod:`tfdist.train.report`, a room below this one)."""

    run_dir: str

    def join(self, name: str) -> str:
        """``name`` in the run directory."""
        return os.path.join(self.run_dir, name)

    def attempt(self, attempt: int) -> AttemptFiles:
        """The files of attempt ``attempt`` (0 for the first start, +1 per restart)."""
        return AttemptFiles(self.join(f"attempt-{attempt}"))

    def first_failure(self, step: str) -> str:
        """The exit code of a scheduler step's first failed task (``step``: e.g. ``4242.0-r1``)."""
        return self.join(f"first-failure-{step}")

    def launcher_log(self, host: str) -> str:
        """``-H``: the output of ``host``'s launcher (its own run directory is ``<run>/<host>``)."""
        return os.path.join(self.run_dir, host, "launcher.log")

    # tfdist train: the checked options its workers read, the launch's run directory, the training's files.
    train_config = _Name("train.json")
    launch_dir = _Name("logs")
    checkpoints = _Name("checkpoints")
    tensorboard = _Name("tensorboard")
    model = _Name("model.keras")
    # tfdist slurm submit: the job script, and Slurm's output unless --output names another.
    sbatch = _Name("job.sbatch")
    slurm_output = _Name("slurm-%j.out")
    # tfdist bench: one run's result, written by its chief.
    bench = _Name("bench.json")


@dataclass(frozen=True)
class TaskSpec:
    """One task of a job, as every source describes it; a ``None`` leaves its variable as it is.

    ``cluster``: written as ``TF_CONFIG`` with ``role``/``index``; ``rank``: -1 for a parameter server,
    ``None`` for the MPI launcher's process; ``run_dir``/``attempt``: the launcher's run.
    """

    world_size: int
    rank: int | None = 0
    local_rank: int = 0
    local_world_size: int = 1
    role: str = "worker"
    index: int = 0
    cluster: Mapping[str, Sequence[str]] | None = None
    run_dir: str | None = None
    attempt: int = 0
    gpus: str | None = None
    all_gpus: bool = False
    backend: str | None = None


def task_env(task: TaskSpec, base: Mapping[str, str]) -> dict[str, str]:
    """The task's environment: ``base`` with the task's place in the job on top, and tfdist's bootstrap.

    Input/Output: ``TaskSpec(world_size=2, rank=1, local_rank=1, local_world_size=2, index=1,
    cluster={"worker": ["a:1", "a:2"]}, run_dir="/r", attempt=0)``, base ``{"PATH": "/bin"}`` ->
    ``{"PATH": "/bin", "TF_CONFIG": '{"cluster": {"worker": ["a:1", "a:2"]}, "task": {"type": "worker",
    "index": 1}}', "TFDIST_RANK": "1", "TFDIST_LOCAL_RANK": "1", "TFDIST_WORLD_SIZE": "2",
    "TFDIST_LOCAL_WORLD_SIZE": "2", "TFDIST_ROLE": "worker", "TFDIST_RUN_DIR": "/r",
    "TFDIST_ATTEMPT_DIR": "/r/attempt-0", "TFDIST_RESTART_COUNT": "0",
    "TFDIST_HEARTBEAT_FILE": "/r/attempt-0/worker1.heartbeat", "PYTHONPATH": "<boot>", ...}``.
    """
    env = dict(base)
    if task.cluster is not None:
        cluster = {role: list(tasks) for role, tasks in task.cluster.items()}
        env["TF_CONFIG"] = json.dumps({"cluster": cluster, "task": {"type": task.role, "index": task.index}})
    if task.backend is not None:
        env["TFDIST_BACKEND"] = task.backend
    if task.rank is not None:
        env |= {
            "TFDIST_RANK": str(task.rank),
            "TFDIST_LOCAL_RANK": str(task.local_rank),
            "TFDIST_WORLD_SIZE": str(task.world_size),
            "TFDIST_LOCAL_WORLD_SIZE": str(task.local_world_size),
            "TFDIST_ROLE": task.role,
        }
    else:
        env["TFDIST_WORLD_SIZE"] = str(task.world_size)
    if task.run_dir is not None:
        files = RunFiles(task.run_dir).attempt(task.attempt)
        env |= {
            "TFDIST_RUN_DIR": task.run_dir,
            "TFDIST_ATTEMPT_DIR": files.directory,
            "TFDIST_RESTART_COUNT": str(task.attempt),
            "TFDIST_HEARTBEAT_FILE": files.heartbeat(task.role, task.index),
        }
    if task.all_gpus:
        env["TFDIST_GPUS_PER_WORKER"] = "all"
    if task.gpus is not None:
        env["CUDA_VISIBLE_DEVICES"] = task.gpus
    return with_bootstrap(env)


#: What travels to the workers on another host, which otherwise start with that host's own environment
#: (every host runs the same Python environment at the same paths).
FORWARDED_PREFIXES = (
    "TFDIST_",
    "TF_",
    "KERAS_",
    "NCCL_",
    "UCX_",
    "XLA_FLAGS",
    "PYTHONHASHSEED",
    "PYTHONPATH",
)
#: Never travels: this task's place, this host's GPUs, the bootstrap's mark and the rendezvous' secret
#: (sent on ssh's input, never in an environment or a command line).
NOT_FORWARDED = frozenset({*TASK_KEYS, "CUDA_VISIBLE_DEVICES", BOOT_MARK, "TFDIST_RDZV_TOKEN"})


def forwarded_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The variables of ``environ`` (this process's) that travel to another host.

    Input/Output: ``{"TFDIST_KERAS_PATCH": "0", "NCCL_DEBUG": "INFO", "TF_CONFIG": "{...}",
    "CUDA_VISIBLE_DEVICES": "0", "HOME": "/root"}`` -> ``{"TFDIST_KERAS_PATCH": "0", "NCCL_DEBUG": "INFO"}``.
    """
    return {k: v for k, v in environ.items() if k.startswith(FORWARDED_PREFIXES) and k not in NOT_FORWARDED}
