"""plan_strategy is pure: tables of environment x devices x options -> plan, or a ConfigError with a hint."""

from __future__ import annotations

import json

import pytest

from tfdist.env import detect_environment
from tfdist.env.base import ClusterEnvironment
from tfdist.errors import ConfigError
from tfdist.strategies import LocalDevices, StrategyOptions, options_from_environ, plan_strategy

LOCAL = detect_environment({})
MULTI = detect_environment(
    {"TF_CONFIG": json.dumps({"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "worker", "index": 1}})}
)
PS = detect_environment(
    {
        "TF_CONFIG": json.dumps(
            {
                "cluster": {"chief": ["c:1"], "worker": ["a:1"], "ps": ["p:1"]},
                "task": {"type": "chief", "index": 0},
            }
        )
    }
)
SINGLE_TF_CONFIG = detect_environment(
    {"TF_CONFIG": json.dumps({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 0}})}
)
TPU = detect_environment({"TPU_NAME": "my-tpu"})
SLURM_2_PER_NODE = detect_environment(
    {
        "SLURM_JOB_ID": "1",
        "SLURM_PROCID": "1",
        "SLURM_LOCALID": "1",
        "SLURM_NTASKS": "2",
        "SLURM_STEP_NODELIST": "n1",
        "SLURM_STEP_TASKS_PER_NODE": "2",
    }
)
CPU = LocalDevices(gpus=(), cpu_cores=2)
GPU1 = LocalDevices(gpus=("/physical_device:GPU:0",), cpu_cores=8)
GPU4 = LocalDevices(gpus=tuple(f"/physical_device:GPU:{i}" for i in range(4)), cpu_cores=32)


@pytest.mark.parametrize(
    ("env", "devices", "options", "kind", "replicas", "gpus"),
    [
        (LOCAL, CPU, StrategyOptions(), "one_device", 1, ()),
        (LOCAL, GPU1, StrategyOptions(), "one_device", 1, (0,)),
        (LOCAL, GPU4, StrategyOptions(), "mirrored", 4, (0, 1, 2, 3)),
        (LOCAL, GPU4, StrategyOptions(devices=(1, 3)), "mirrored", 2, (1, 3)),
        (LOCAL, GPU4, StrategyOptions(kind="one_device"), "one_device", 1, (0,)),
        (LOCAL, CPU, StrategyOptions(cpu_replicas=4), "mirrored", 4, ()),
        (MULTI, CPU, StrategyOptions(), "multi_worker", 2, ()),
        (SINGLE_TF_CONFIG, CPU, StrategyOptions(kind="multi_worker"), "multi_worker", 1, ()),
        (PS, CPU, StrategyOptions(), "parameter_server", 1, ()),
        (TPU, CPU, StrategyOptions(), "tpu", 0, ()),
        (SLURM_2_PER_NODE, GPU4, StrategyOptions(), "multi_worker", 2, (1,)),
        (SLURM_2_PER_NODE, GPU4, StrategyOptions(gpus_per_worker_all=True), "multi_worker", 8, (0, 1, 2, 3)),
    ],
)
def test_plan_table(
    env: ClusterEnvironment,
    devices: LocalDevices,
    options: StrategyOptions,
    kind: str,
    replicas: int,
    gpus: tuple,
) -> None:
    plan = plan_strategy(env, devices, options)
    assert (plan.kind, plan.num_replicas, plan.gpu_indices) == (kind, replicas, gpus)
    assert plan.reason


def test_multi_worker_plan_carries_cluster_and_timeout() -> None:
    plan = plan_strategy(MULTI, CPU, StrategyOptions(communication="ring"))
    assert plan.cluster_spec == {"worker": ["a:1", "b:1"]} and (plan.task_type, plan.task_index) == (
        "worker",
        1,
    )
    assert plan.collective_timeout == 300.0 and plan.communication == "ring"
    assert not any("model.fit" in w for w in plan.warnings)  # the Keras fix makes model.fit work here


def test_options_from_environ_precedence() -> None:
    environ = {"TFDIST_CPU_REPLICAS": "4", "TFDIST_COLLECTIVE_TIMEOUT": "30", "TFDIST_COMMUNICATION": "RING"}
    opts = options_from_environ(environ)
    assert (opts.cpu_replicas, opts.collective_timeout, opts.communication) == (4, 30.0, "ring")
    assert options_from_environ(environ, cpu_replicas=2).cpu_replicas == 2
    assert options_from_environ({"TFDIST_COLLECTIVE_TIMEOUT": "0"}).collective_timeout is None


@pytest.mark.parametrize(
    ("env", "devices", "options", "expected"),
    [
        (LOCAL, CPU, {"kind": "mirrored"}, "'mirrored' needs at least 2 devices"),
        (LOCAL, GPU1, {"kind": "mirrored"}, "has 1 GPU(s)"),
        (LOCAL, CPU, {"kind": "multi_worker"}, "needs a cluster"),
        (LOCAL, CPU, {"kind": "parameter_server"}, "needs ps tasks"),
        (LOCAL, CPU, {"kind": "tpu"}, "no TPU is detected"),
        (MULTI, CPU, {"kind": "mirrored"}, "each would train alone"),
        (MULTI, CPU, {"kind": "one_device"}, "each would train alone"),
        (MULTI, CPU, {"cpu_replicas": 2}, "cannot be combined with 'multi_worker'"),
        (PS, CPU, {"kind": "multi_worker"}, "has ps tasks"),
        (LOCAL, CPU, {"communication": "nccl"}, "needs GPUs"),
        (LOCAL, CPU, {"kind": "one_device", "cpu_replicas": 4}, "use kind='mirrored'"),
        (LOCAL, GPU1, {"devices": (2,)}, "asks for GPU 2 but this process sees 1"),
        (LOCAL, CPU, {"kind": "grid"}, "unknown"),
        (LOCAL, CPU, {"communication": "mpi"}, "unknown"),
        (LOCAL, CPU, {"collective_timeout": -1.0}, "must be positive"),
        (LOCAL, CPU, {"cpu_replicas": 0}, "at least 1"),
        (SLURM_2_PER_NODE, GPU1, {}, "1 GPU(s) but 2 tasks run on this node"),
    ],
)
def test_plan_refuses_what_the_environment_cannot_serve(
    env: ClusterEnvironment, devices: LocalDevices, options: dict, expected: str
) -> None:
    with pytest.raises(ConfigError) as info:
        plan_strategy(env, devices, StrategyOptions(**options))
    assert expected in str(info.value)


def test_cuda_visible_devices_fewer_than_tasks_names_the_variable() -> None:
    env = detect_environment(
        {
            "SLURM_JOB_ID": "1",
            "SLURM_PROCID": "0",
            "SLURM_NTASKS": "4",
            "SLURM_STEP_NODELIST": "n1",
            "SLURM_STEP_TASKS_PER_NODE": "4",
            "CUDA_VISIBLE_DEVICES": "0,1",
        }
    )
    with pytest.raises(ConfigError, match="CUDA_VISIBLE_DEVICES gives 2 GPU"):
        plan_strategy(env, LocalDevices(gpus=("g0", "g1")), StrategyOptions())


def test_bad_environment_number_is_config_error() -> None:
    with pytest.raises(ConfigError, match="TFDIST_CPU_REPLICAS='four'"):
        options_from_environ({"TFDIST_CPU_REPLICAS": "four"})


MPI_ENV = detect_environment(
    {"PMI_RANK": "1", "PMI_SIZE": "2", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "2"}
)


@pytest.mark.parametrize(
    ("environ", "rank", "size", "local"),
    [
        ({"PMI_RANK": "1", "PMI_SIZE": "2", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "2"}, 1, 2, 1),
        (
            {
                "OMPI_COMM_WORLD_RANK": "3",
                "OMPI_COMM_WORLD_SIZE": "4",
                "OMPI_COMM_WORLD_LOCAL_RANK": "1",
                "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
            },
            3,
            4,
            1,
        ),
        ({"PMIX_RANK": "0", "SLURM_NTASKS": "2"}, 0, 2, 0),
    ],
)
def test_mpi_environments(environ: dict[str, str], rank: int, size: int, local: int) -> None:
    env = detect_environment(environ)
    assert (env.kind, env.rank, env.world_size, env.local_rank) == ("mpi", rank, size, local)
    assert env.is_chief == (rank == 0)


def test_mpi_environment_plans_one_device_with_the_mpi_backend() -> None:
    plan = plan_strategy(MPI_ENV, CPU, StrategyOptions())
    assert (plan.kind, plan.backend, plan.num_replicas) == ("one_device", "mpi", 2)
    gpu_plan = plan_strategy(MPI_ENV, LocalDevices(gpus=("g0", "g1")), StrategyOptions())
    assert gpu_plan.gpu_indices == (1,)  # one GPU per rank, by local rank


def test_horovod_backend_plans_like_mpi() -> None:
    plan = plan_strategy(MPI_ENV, CPU, StrategyOptions(backend="horovod"))
    assert (plan.kind, plan.backend, plan.num_replicas) == ("one_device", "horovod", 2)
    with pytest.raises(ConfigError, match="cannot be combined with the MPI backend"):
        plan_strategy(MPI_ENV, CPU, StrategyOptions(backend="horovod", kind="multi_worker"))


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({"kind": "multi_worker"}, "cannot be combined with the MPI backend"),
        ({"kind": "mirrored"}, "cannot be combined with the MPI backend"),
        ({"cpu_replicas": 2}, "cannot be combined with the MPI backend"),
        ({"backend": "nccl"}, "TFDIST_BACKEND='nccl' is not a backend"),
    ],
)
def test_mpi_backend_refuses_other_strategies(options: dict, expected: str) -> None:
    with pytest.raises(ConfigError, match=expected):
        plan_strategy(MPI_ENV, CPU, StrategyOptions(**options))


def test_bad_mpi_variables() -> None:
    with pytest.raises(ConfigError, match="PMI_RANK=2 but PMI_SIZE=2"):
        detect_environment({"PMI_RANK": "2", "PMI_SIZE": "2"})
