"""The worker contract: one writer of a task's environment for every source of workers, one type naming
the run directory's files, and one list of what travels to another host."""

from __future__ import annotations

import json
import os

import pytest

from tfdist.env import detect_environment
from tfdist.launcher.config import LaunchConfig
from tfdist.launcher.fanout import commands
from tfdist.launcher.plan import plan_mpi, plan_workers
from tfdist.launcher.ray.plan import Placement, plan_ray_workers
from tfdist.worker import BOOT_MARK, boot_dir
from tfdist.worker.contract import AttemptFiles, RunFiles, TaskSpec, forwarded_env, task_env
from tfdist.worker.task import plan_task_env

TWO = {"worker": ["a:1", "a:2"]}
PLACE = ("TFDIST_RANK", "TFDIST_LOCAL_RANK", "TFDIST_WORLD_SIZE", "TFDIST_LOCAL_WORLD_SIZE", "TFDIST_ROLE")
RUN = ("TFDIST_RUN_DIR", "TFDIST_ATTEMPT_DIR", "TFDIST_RESTART_COUNT", "TFDIST_HEARTBEAT_FILE")


@pytest.mark.parametrize(
    ("task", "base", "expected", "absent"),
    [
        (  # a launcher's worker
            TaskSpec(2, 1, 1, 2, "worker", 1, TWO, "/r", 3),
            {"PATH": "/bin"},
            {
                "PATH": "/bin",
                "TF_CONFIG": json.dumps({"cluster": TWO, "task": {"type": "worker", "index": 1}}),
                "TFDIST_RANK": "1",
                "TFDIST_LOCAL_RANK": "1",
                "TFDIST_WORLD_SIZE": "2",
                "TFDIST_LOCAL_WORLD_SIZE": "2",
                "TFDIST_ROLE": "worker",
                "TFDIST_RUN_DIR": "/r",
                "TFDIST_ATTEMPT_DIR": "/r/attempt-3",
                "TFDIST_RESTART_COUNT": "3",
                "TFDIST_HEARTBEAT_FILE": "/r/attempt-3/worker1.heartbeat",
            },
            ("CUDA_VISIBLE_DEVICES", "TFDIST_BACKEND", "TFDIST_GPUS_PER_WORKER"),
        ),
        (  # a parameter server: no training rank, no GPU
            TaskSpec(2, -1, -1, 2, "ps", 0, {**TWO, "ps": ["a:3"]}, "/r", 0, gpus=""),
            {},
            {
                "TFDIST_RANK": "-1",
                "TFDIST_ROLE": "ps",
                "CUDA_VISIBLE_DEVICES": "",
                "TFDIST_HEARTBEAT_FILE": "/r/attempt-0/ps0.heartbeat",
            },
            (),
        ),
        (  # the MPI launcher's process: its ranks get their rank from it
            TaskSpec(4, None, role="mpi", run_dir="/r", backend="mpi"),
            {"TFDIST_RANK": "7"},
            {
                "TFDIST_WORLD_SIZE": "4",
                "TFDIST_BACKEND": "mpi",
                "TFDIST_RANK": "7",
                "TFDIST_HEARTBEAT_FILE": "/r/attempt-0/mpi.heartbeat",
            },
            ("TF_CONFIG", "TFDIST_ROLE", "TFDIST_LOCAL_RANK"),
        ),
        (  # tfdist run under a scheduler: no launcher's run; the user's TF_CONFIG stays
            TaskSpec(2, 1, 0, 1, "worker", 1, None, gpus="3", all_gpus=True),
            {"TF_CONFIG": "mine", "TFDIST_RANK": "9"},
            {
                "TF_CONFIG": "mine",
                "TFDIST_RANK": "1",
                "CUDA_VISIBLE_DEVICES": "3",
                "TFDIST_GPUS_PER_WORKER": "all",
            },
            RUN,
        ),
    ],
)
def test_task_env(
    task: TaskSpec, base: dict[str, str], expected: dict[str, str], absent: tuple[str, ...]
) -> None:
    env = task_env(task, base)
    assert {k: env.get(k) for k in expected} == expected
    assert [k for k in absent if k in env] == []
    assert env["PYTHONPATH"].split(os.pathsep)[0] == boot_dir() and env[BOOT_MARK] == "1"
    assert base.get("TFDIST_RANK") in (None, "7", "9")  # the base is not changed


def test_what_a_worker_is_told_is_what_tfdist_detects() -> None:
    env = task_env(TaskSpec(2, 1, 1, 2, "worker", 1, TWO, "/r"), {})
    found = detect_environment(env)
    assert (found.kind, found.rank, found.world_size, found.local_rank) == ("tf_config", 1, 2, 1)


def slurm_task(rank: int) -> dict[str, str]:
    """Rank ``rank`` of a Slurm step of 2 nodes x 2 tasks, on the ports of a launch's --base-port 29400."""
    return {
        "SLURM_JOB_ID": "77",
        "SLURM_PROCID": str(rank),
        "SLURM_LOCALID": str(rank % 2),
        "SLURM_STEP_NUM_TASKS": "4",
        "SLURM_STEP_NODELIST": "n[1-2]",
        "SLURM_STEP_TASKS_PER_NODE": "2(x2)",
        "TFDIST_PORT": "29400",
    }


def test_the_three_sources_give_the_same_environment_for_the_same_job() -> None:
    """2 nodes x 2 workers: the launcher on each node (--hosts), Ray placing the four, srun's four tasks."""
    keys = ("TF_CONFIG", *PLACE)
    launcher = []
    for node in (0, 1):
        config = LaunchConfig(
            command=("t.py",), nproc_per_node=2, nnodes=2, node_rank=node, hosts=("n1", "n2"), base_port=29400
        )
        launcher += plan_workers(
            config, local_ports=None, visible_gpus=[], cores=2, run_dir="/r", attempt=0, base_env={}
        )
    places = [Placement(host, port, host) for host in ("n1", "n2") for port in (29400, 29401)]
    ray = plan_ray_workers(
        LaunchConfig(command=("t.py",), nproc_per_node=4, ray="h:6379"),
        places,
        run_dir="/r",
        attempt=0,
        base_env={},
    )
    srun = [plan_task_env(detect_environment(slurm_task(r)), slurm_task(r)) for r in range(4)]
    by_launcher = [{k: s.env[k] for k in keys} for s in launcher]
    assert by_launcher == [{k: s.env[k] for k in keys} for s in ray]
    assert by_launcher == [{k: e[k] for k in keys} for e in srun]
    assert [e["TFDIST_LOCAL_RANK"] for e in by_launcher] == ["0", "1", "0", "1"]
    # The launcher's run is the launcher's and Ray's alike; a scheduler's task has none.
    assert [{k: s.env[k] for k in RUN} for s in launcher] == [{k: s.env[k] for k in RUN} for s in ray]
    assert not any(k in e for e in srun for k in RUN)


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        (RunFiles("/r").attempt(2).directory, "/r/attempt-2"),
        (RunFiles("/r").attempt(0).log("worker", 1), "/r/attempt-0/worker1.log"),
        (RunFiles("/r").attempt(0).log("chief"), "/r/attempt-0/chief0.log"),
        (RunFiles("/r").attempt(0).log("mpi"), "/r/attempt-0/mpi.log"),
        (RunFiles("/r").attempt(0).log("proxy", 1), "/r/attempt-0/proxy1.log"),
        (RunFiles("/r").attempt(0).heartbeat("ps", 0), "/r/attempt-0/ps0.heartbeat"),
        (RunFiles("/r").attempt(0).rank_log(3), "/r/attempt-0/rank3.log"),
        (RunFiles("/r").attempt(1).ended, "/r/attempt-1/ended.json"),
        (RunFiles("/r").attempt(1).record("error", 2), "/r/attempt-1/rank2.error.json"),
        (RunFiles("/r").attempt(1).record("strategy", "0"), "/r/attempt-1/rank0.strategy.json"),
        (RunFiles("/r").launcher_log("n2"), "/r/n2/launcher.log"),
        (RunFiles("/r").train_config, "/r/train.json"),
        (RunFiles("/r").bench, "/r/bench.json"),
        (RunFiles.sbatch, "job.sbatch"),
    ],
)
def test_run_files(path: str, expected: str) -> None:
    assert path == expected


@pytest.mark.parametrize(
    ("name", "kind", "owner"),
    [
        ("rank1.error.json", "error", "1"),
        ("pid42.error.json", "error", "pid42"),
        ("rank1.strategy.json", "error", None),
        ("rank1.log", "error", None),
        (".rank1.error.json", "error", None),  # an atomic write's temporary name
        ("rank12.strategy.json", "strategy", "12"),
    ],
)
def test_who_wrote_a_record(name: str, kind: str, owner: str | None) -> None:
    assert AttemptFiles.record_owner(name, kind) == owner


def test_the_planners_name_their_files_through_run_files() -> None:
    config = LaunchConfig(command=("t.py",), nproc_per_node=2, backend="mpi", cpu=True)
    (mpi,) = plan_mpi(config, mpiexec="mpiexec", cores=2, run_dir="/r", attempt=1, base_env={})
    files = RunFiles("/r").attempt(1)
    assert mpi.log_path == files.log("mpi") and mpi.env["TFDIST_HEARTBEAT_FILE"] == files.heartbeat("mpi")
    assert mpi.env["TFDIST_ATTEMPT_DIR"] == files.directory


HOST_ENV = {
    "TFDIST_KERAS_PATCH": "0",
    "TF_CPP_MIN_LOG_LEVEL": "1",
    "TF_ENABLE_ONEDNN_OPTS": "0",
    "KERAS_BACKEND": "tensorflow",
    "NCCL_DEBUG": "INFO",
    "NCCL_SOCKET_IFNAME": "eth0",
    "UCX_TLS": "tcp",
    "XLA_FLAGS": "--xla_dump_to=/tmp/x",
    "PYTHONHASHSEED": "0",
    "PYTHONPATH": "/shared/lib",
}


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("CUDA_VISIBLE_DEVICES", "0,1"),  # each host has its own GPUs
        ("TF_CONFIG", "{}"),  # this task's place, not the other host's
        ("TFDIST_RANK", "0"),
        ("TFDIST_LOCAL_RANK", "0"),
        ("TFDIST_WORLD_SIZE", "2"),
        ("TFDIST_ATTEMPT_DIR", "/r/attempt-0"),
        ("TFDIST_HEARTBEAT_FILE", "/r/attempt-0/worker0.heartbeat"),
        ("TFDIST_RDZV_TOKEN", "secret"),  # sent on ssh's input only
        (BOOT_MARK, "1"),
        ("HOME", "/root"),
        ("PATH", "/usr/bin"),
        ("LD_LIBRARY_PATH", "/opt/lib"),
    ],
)
def test_what_stays_on_this_host(name: str, value: str) -> None:
    assert forwarded_env({**HOST_ENV, name: value}) == HOST_ENV


def test_ssh_hosts_get_the_same_variables_as_ray_nodes(monkeypatch: pytest.MonkeyPatch) -> None:
    """-H: every host's launcher starts with the forwarded variables exported, this host's GPUs not."""
    for name, value in {**HOST_ENV, "CUDA_VISIBLE_DEVICES": "0,1", "TF_CONFIG": "{}"}.items():
        monkeypatch.setenv(name, value)
    config = LaunchConfig(command=("t.py",), host_slots="localhost:1", run_dir="/w/runs")
    ((_host, argv),) = commands(config, "localhost:29400", "/w")
    shell = argv[-1]
    assert (
        "export NCCL_DEBUG=INFO;" in shell
        and "export XLA_FLAGS=" in shell
        and "export KERAS_BACKEND=" in shell
    )
    assert "CUDA_VISIBLE_DEVICES" not in shell and "TF_CONFIG" not in shell
