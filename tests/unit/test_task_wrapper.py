"""`tfdist run`: the task environment derived from Slurm's variables (pure), and the exec (real processes)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from helpers.cli import tfdist
from tfdist.env import detect_environment
from tfdist.errors import ConfigError
from tfdist.mpi.stack import has_mpich_wheel, pmi1_safe_netmod
from tfdist.worker import boot_dir
from tfdist.worker.task import plan_task_env


def srun_task(rank: int, tasks: int = 2, **extra: str) -> dict[str, str]:
    """The variables srun sets for one task of a one-node step."""
    return {
        "SLURM_JOB_ID": "4242",
        "SLURM_PROCID": str(rank),
        "SLURM_LOCALID": str(rank),
        "SLURM_NTASKS": str(tasks),
        "SLURM_STEP_NUM_TASKS": str(tasks),
        "SLURM_STEP_NODELIST": "n1",
        "SLURM_STEP_TASKS_PER_NODE": str(tasks),
        "PATH": os.environ.get("PATH", ""),
        **extra,
    }


def planned(environ: dict[str, str], node_gpus: int = 0) -> dict[str, str]:
    return plan_task_env(detect_environment(environ), environ, node_gpus)


def test_each_task_gets_its_place_in_one_cluster() -> None:
    first, second = planned(srun_task(0)), planned(srun_task(1))
    config = [json.loads(e["TF_CONFIG"]) for e in (first, second)]
    assert config[0]["cluster"] == config[1]["cluster"]  # every task derives the same ports
    assert len(config[0]["cluster"]["worker"]) == 2
    assert [c["task"] for c in config] == [{"type": "worker", "index": 0}, {"type": "worker", "index": 1}]
    assert (second["TFDIST_RANK"], second["TFDIST_WORLD_SIZE"], second["TFDIST_LOCAL_RANK"]) == (
        "1",
        "2",
        "1",
    )
    assert second["PYTHONPATH"].split(os.pathsep)[0] == boot_dir()  # the Keras fix


def test_a_users_tf_config_wins_and_one_task_needs_none() -> None:
    mine = json.dumps({"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "worker", "index": 1}})
    assert planned(srun_task(1, TF_CONFIG=mine))["TF_CONFIG"] == mine
    assert "TF_CONFIG" not in planned(srun_task(0, tasks=1))


@pytest.mark.parametrize(
    ("extra", "node_gpus", "expected"),
    [
        ({"CUDA_VISIBLE_DEVICES": "0,1"}, 0, "1"),
        ({"CUDA_VISIBLE_DEVICES": "2,3"}, 0, "3"),
        ({}, 4, "1"),  # no CUDA_VISIBLE_DEVICES: the driver's count
        ({}, 0, None),  # CPU node
        ({"CUDA_VISIBLE_DEVICES": "0,1", "TFDIST_GPUS_PER_WORKER": "all"}, 0, "0,1"),  # --per-node mirrored
    ],
)
def test_one_gpu_per_task_by_local_rank(extra: dict[str, str], node_gpus: int, expected: str | None) -> None:
    env = planned(srun_task(1, **extra), node_gpus)
    assert env.get("CUDA_VISIBLE_DEVICES") == expected


def test_more_tasks_than_gpus_is_refused() -> None:
    with pytest.raises(ConfigError, match="3 tasks on this node share 2 GPU"):
        planned(srun_task(2, tasks=3, CUDA_VISIBLE_DEVICES="0,1"))


def test_the_command_runs_in_place_with_the_task_environment() -> None:
    probe = (
        "import os, json; print(os.getpid() == int(os.environ['PARENT']), os.environ['TFDIST_RANK'], "
        "json.loads(os.environ['TF_CONFIG'])['task'])"
    )
    env = {**srun_task(1), "PYTHONPATH": os.pathsep.join(sys.path)}
    # the parent pid check: `sh -c` execs tfdist run, which execs python: one process all along
    proc = subprocess.run(
        ["sh", "-c", f'PARENT=$$ exec {sys.executable} -m tfdist run -- {sys.executable} -c "{probe}"'],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "True 1 {'type': 'worker', 'index': 1}"


PMI2_TASK = {"SLURM_MPI_TYPE": "pmi2", "PMI_FD": "11", "PMI_RANK": "0"}


@pytest.mark.parametrize(
    ("environ", "wheel", "expected"),
    [
        (PMI2_TASK, True, {"MPIR_CVAR_CH4_NETMOD": "ofi"}),
        ({**PMI2_TASK, "MPIR_CVAR_CH4_NETMOD": "ucx"}, True, {}),  # the user's choice stays
        ({**PMI2_TASK, "MPICH_CH4_NETMOD": "ucx"}, True, {}),
        (PMI2_TASK, False, {}),  # another MPI: its own business
        ({**PMI2_TASK, "SLURM_MPI_TYPE": "pmix"}, True, {}),  # pmix reads whole messages
        ({"SLURM_MPI_TYPE": "pmi2"}, True, {}),  # no PMI socket: not an MPI step
    ],
)
def test_mpich_ranks_under_slurms_pmi2_use_short_pmi_lines(
    environ: dict[str, str], wheel: bool, expected: dict[str, str]
) -> None:
    assert pmi1_safe_netmod(environ, wheel) == expected


def test_the_mpich_wheel_of_the_dev_extra_is_found() -> None:
    """The dev environment installs the mpich wheel (pyproject's dev extra), the one the fix is for."""
    assert has_mpich_wheel()


def test_the_task_under_pmi2_gets_the_netmod_before_its_command_runs() -> None:
    probe = "import os; print(os.environ.get('MPIR_CVAR_CH4_NETMOD'))"
    env = {**srun_task(0), **PMI2_TASK, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = tfdist("run", "--", sys.executable, "-c", probe, base_env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ofi"


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ((), "tfdist run: error: no command to run. Hint: tfdist run -- python train.py"),
        (
            ("--", "no-such-program-xyz"),
            "tfdist run: error: command 'no-such-program-xyz' not found on PATH.",
        ),
    ],
)
def test_bad_commands_are_one_line_exit_2(args: tuple[str, ...], expected: str) -> None:
    proc = tfdist("run", *args, base_env={"PATH": os.environ["PATH"]}, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.startswith(expected) and proc.stderr.count("\n") == 1


def test_a_rank_srun_started_without_tfdist_run_gets_the_netmod_before_mpi_init() -> None:
    """``srun --mpi=pmi2 python train.py`` (a hand-written sbatch): tfdist's own MPI import sets it."""
    probe = (
        "import os, mpi4py; mpi4py.rc.initialize = False\n"  # the variable is what is checked, not MPI_Init
        "from tfdist.mpi.rank import import_mpi; import_mpi()\n"
        "print(os.environ.get('MPIR_CVAR_CH4_NETMOD'))\n"
    )
    env = {**os.environ, **PMI2_TASK}
    env.pop("MPIR_CVAR_CH4_NETMOD", None)
    proc = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ofi"


def test_the_step_reports_its_first_failure_and_the_stopped_tasks_repeat_it(tmp_path) -> None:
    from tfdist.worker.task import first_failure_record, step_exit_code

    environ = srun_task(1, SLURM_STEP_ID="0", TFDIST_RUN_DIR=str(tmp_path))
    record = first_failure_record(environ)
    assert record == str(tmp_path / "first-failure-4242.0-r0")
    assert step_exit_code(record, 3, failed_first=True) == 3  # task 1 failed first
    assert step_exit_code(record, 1, failed_first=True) == 3  # a consequence, later: the first one's code
    assert step_exit_code(record, 143, failed_first=False) == 3  # stopped by srun
    assert sorted(os.listdir(tmp_path)) == ["first-failure-4242.0-r0"]  # no temporary file left
    requeued = first_failure_record({**environ, "SLURM_RESTART_COUNT": "1"})
    assert requeued is not None and step_exit_code(requeued, 143, failed_first=False) == 143  # scancel


@pytest.mark.parametrize(
    "missing", ["TFDIST_RUN_DIR", "SLURM_STEP_ID", "SLURM_JOB_ID"], ids=lambda name: f"no {name}"
)
def test_outside_a_slurm_step_of_a_run_the_command_is_execd(tmp_path, missing: str) -> None:
    from tfdist.worker.task import first_failure_record

    environ = srun_task(0, SLURM_STEP_ID="0", TFDIST_RUN_DIR=str(tmp_path))
    del environ[missing]
    assert first_failure_record(environ) is None
