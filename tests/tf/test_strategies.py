"""Real TensorFlow: strategies built by tfdist on logical CPU devices and on two local processes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.cli import tfdist
from tfdist.launcher.config import LaunchConfig
from tfdist.launcher.plan import plan_workers

PROBE = Path(__file__).parent.parent / "helpers" / "strategy_probe.py"


def run_probe(env: dict[str, str], *args: str, timeout: float = 120) -> tuple[int, dict]:
    proc = subprocess.run(
        [sys.executable, str(PROBE), *args], env=env, capture_output=True, text=True, timeout=timeout
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    assert lines, proc.stdout + proc.stderr
    return proc.returncode, json.loads(lines[-1])


def base_env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items()}


def test_mirrored_over_four_logical_cpus_sums_every_replica() -> None:
    code, out = run_probe({**base_env(), "TFDIST_CPU_REPLICAS": "4"})
    assert code == 0
    assert out["kind"] == "MirroredStrategy" and out["replicas"] == 4
    assert out["sums"] == [10.0] * 4  # 1 + 2 + 3 + 4 on every replica


def test_one_device_by_default() -> None:
    code, out = run_probe(base_env())
    assert (code, out["kind"], out["replicas"], out["sums"]) == (0, "OneDeviceStrategy", 1, [1.0])


def test_two_processes_build_multi_worker_from_planned_tf_config(tmp_path: Path) -> None:
    from tfdist.nodes import free_ports

    config = LaunchConfig(nproc_per_node=2, cpu=True)
    specs = plan_workers(
        config,
        local_ports=free_ports(2),
        visible_gpus=[],
        cores=2,
        run_dir=str(tmp_path),
        attempt=0,
        base_env=base_env(),
    )
    procs = [
        subprocess.Popen(
            [sys.executable, str(PROBE)], env=s.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for s in specs
    ]
    outs = []
    try:
        for proc in procs:
            stdout, stderr = proc.communicate(timeout=120)
            assert proc.returncode == 0, stderr[-2000:]
            outs.append(json.loads([line for line in stdout.splitlines() if line.startswith("{")][-1]))
    finally:
        for proc in procs:
            proc.kill()
    assert [o["kind"] for o in outs] == ["MultiWorkerMirroredStrategy"] * 2
    assert [o["replicas"] for o in outs] == [2, 2]
    # Global replica ids are 0 and 1: (0*10 + 0 + 1) + (1*10 + 1 + 1) = 13 on both workers.
    assert [o["sums"] for o in outs] == [[13.0], [13.0]]


def test_op_before_multi_worker_strategy_is_a_clear_error(tmp_path: Path) -> None:
    tf_config = json.dumps({"cluster": {"worker": ["127.0.0.1:1"]}, "task": {"type": "worker", "index": 0}})
    code, out = run_probe(
        {**base_env(), "TF_CONFIG": tf_config, "TFDIST_STRATEGY": "multi_worker"}, "--op-first"
    )
    assert code == 2
    assert "create the strategy first thing" in out["error"]


def test_env_json_reports_required_keys() -> None:
    secret = {"TFDIST_CPU_REPLICAS": "2", "TFDIST_SECRET_TOKEN": "hunter2"}
    proc = tfdist("env", "--json", base_env=base_env(), env=secret)
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    for key in (
        "kind",
        "rank",
        "world_size",
        "local_rank",
        "role",
        "cluster_spec",
        "devices",
        "strategy",
        "versions",
    ):
        assert key in info
    assert info["strategy"]["kind"] == "mirrored" and info["strategy"]["num_replicas"] == 2
    assert info["variables"]["TFDIST_SECRET_TOKEN"] == "<redacted>"
    assert "hunter2" not in proc.stdout
    assert info["versions"]["tensorflow"].startswith("2.")


def test_env_table_has_bug_report_block() -> None:
    proc = tfdist("env", base_env=base_env())
    assert proc.returncode == 0, proc.stderr
    assert "Copy this into a bug report" in proc.stdout and "- tensorflow: 2." in proc.stdout


@pytest.mark.parametrize(
    ("variables", "expected"),
    [
        ({"TF_CONFIG": "{oops"}, "TF_CONFIG is not valid JSON"),
        (
            {"SLURM_PROCID": "5", "SLURM_NTASKS": "2", "SLURM_STEP_NODELIST": "n1", "SLURM_JOB_ID": "3"},
            "SLURM_PROCID=5",
        ),
        ({"TFDIST_STRATEGY": "mirrored"}, "'mirrored' needs at least 2 devices"),
    ],
)
def test_env_bad_environment_is_one_line_exit_2(variables: dict[str, str], expected: str) -> None:
    proc = tfdist("env", base_env=base_env(), env=variables)
    assert proc.returncode == 2
    assert expected in proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr


def test_num_replicas_counts_mpi_ranks_but_not_collective_workers_twice(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import tensorflow as tf

    import tfdist

    one_device = tf.distribute.OneDeviceStrategy("/cpu:0")
    assert tfdist.backend() == "tf" and tfdist.num_replicas(one_device) == 1
    # Rank 0 of 4 under MPICH's Hydra: the MPI backend, each rank with its own one-device strategy.
    for key, value in {
        "PMI_RANK": "0",
        "PMI_SIZE": "4",
        "MPI_LOCALRANKID": "0",
        "MPI_LOCALNRANKS": "4",
    }.items():
        monkeypatch.setenv(key, value)
    assert tfdist.backend() == "mpi" and tfdist.num_replicas(one_device) == 4
    monkeypatch.setenv("TFDIST_BACKEND", "tf")
    assert tfdist.backend() == "tf" and tfdist.num_replicas(one_device) == 1


def test_strategy_is_built_once_per_process() -> None:
    import tfdist
    from tfdist.errors import ConfigError

    first = tfdist.strategy()
    assert tfdist.strategy() is first  # same arguments: the same strategy, nothing rebuilt
    with pytest.raises(ConfigError, match=r"already called in this process and built one_device .* mirrored"):
        tfdist.strategy(kind="mirrored", cpu_replicas=2)
