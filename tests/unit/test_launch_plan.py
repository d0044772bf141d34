"""Launch planning is pure: slots, ports, TF_CONFIG, GPU and thread environment per worker."""

from __future__ import annotations

import json

import pytest

from tfdist.env import detect_environment
from tfdist.errors import ConfigError
from tfdist.launcher.config import LaunchConfig
from tfdist.launcher.plan import cluster_spec, gpu_assignment, plan_slots, plan_workers, thread_env


def names(config: LaunchConfig) -> list[str]:
    return [s.name for s in plan_slots(config)]


def test_slots_single_node_and_ps() -> None:
    assert names(LaunchConfig(nproc_per_node=2)) == ["w0", "w1"]
    assert names(LaunchConfig(nproc_per_node=2, ps=1)) == ["chief", "w0", "w1", "ps0"]
    assert names(LaunchConfig(nproc_per_node=1, chief=True)) == ["chief", "w0"]


def test_multi_node_spec_is_the_same_on_every_node() -> None:
    specs = []
    for node in range(3):
        config = LaunchConfig(
            nproc_per_node=2, nnodes=3, node_rank=node, hosts=("a", "b", "c"), base_port=5000
        )
        specs.append(cluster_spec(config, plan_slots(config), None))
    assert specs[0] == specs[1] == specs[2]
    assert specs[0] == {"worker": ["a:5000", "a:5001", "b:5000", "b:5001", "c:5000", "c:5001"]}


def test_workers_get_tf_config_that_tfdist_detects(tmp_path) -> None:
    config = LaunchConfig(nproc_per_node=2, cpu=True, watchdog_timeout=30)
    specs = plan_workers(
        config,
        local_ports=[4001, 4002],
        visible_gpus=[],
        cores=2,
        run_dir=str(tmp_path),
        attempt=1,
        base_env={},
    )
    assert [s.name for s in specs] == ["w0", "w1"]
    for rank, spec in enumerate(specs):
        env = detect_environment(spec.env)
        assert (env.kind, env.rank, env.world_size) == ("tf_config", rank, 2)
        assert env.cluster_spec == {"worker": ["127.0.0.1:4001", "127.0.0.1:4002"]}
        assert spec.env["TFDIST_RESTART_COUNT"] == "1"
        assert spec.env["TF_NUM_INTRAOP_THREADS"] == "1" and spec.env["CUDA_VISIBLE_DEVICES"] == ""
        assert spec.env["TFDIST_COLLECTIVE_TIMEOUT"] == "30"
        assert spec.log_path == str(tmp_path / "attempt-1" / f"worker{rank}.log")


def test_ps_job_runs_servers_for_ps_and_workers(tmp_path) -> None:
    config = LaunchConfig(command=("x.py",), nproc_per_node=2, ps=1, no_python=True)
    specs = plan_workers(
        config,
        local_ports=[1, 2, 3, 4],
        visible_gpus=[],
        cores=4,
        run_dir=str(tmp_path),
        attempt=0,
        base_env={},
    )
    argv = {s.name: s.argv for s in specs}
    assert argv["chief"] == ("x.py",)
    assert argv["w0"][-1] == "tfdist.launcher.ps_server" and argv["ps0"][-1] == "tfdist.launcher.ps_server"
    task = json.loads(specs[-1].env["TF_CONFIG"])["task"]
    assert task == {"type": "ps", "index": 0}


@pytest.mark.parametrize(
    ("kwargs", "n", "visible", "expected"),
    [
        ({}, 2, ["0", "1", "2"], ["0", "1"]),
        ({"cpu": True}, 2, ["0", "1"], ["", ""]),
        ({"gpus_per_worker": "all"}, 1, ["0", "1"], [None]),
        ({}, 2, [], [None, None]),
    ],
)
def test_gpu_assignment(kwargs: dict, n: int, visible: list[str], expected: list) -> None:
    assert gpu_assignment(LaunchConfig(**kwargs), n, visible) == expected


def test_too_few_gpus_is_an_error() -> None:
    with pytest.raises(ConfigError, match="only 1 GPU"):
        gpu_assignment(LaunchConfig(), 2, ["0"])


@pytest.mark.parametrize(("cores", "n", "share"), [(2, 2, "1"), (8, 2, "4"), (2, 4, "1"), (16, 3, "5")])
def test_thread_share(cores: int, n: int, share: str) -> None:
    assert thread_env(cores, n)["TF_NUM_INTRAOP_THREADS"] == share


def test_user_thread_settings_win_over_the_planned_share(tmp_path) -> None:
    config = LaunchConfig(command=("x.py",), nproc_per_node=2, cpu=True, no_python=True)
    specs = plan_workers(
        config,
        local_ports=[4001, 4002],
        visible_gpus=[],
        cores=8,
        run_dir=str(tmp_path),
        attempt=0,
        base_env={"TF_NUM_INTRAOP_THREADS": "1"},
    )
    for spec in specs:
        assert spec.env["TF_NUM_INTRAOP_THREADS"] == "1"  # the user's
        assert spec.env["TF_NUM_INTEROP_THREADS"] == "4"  # planned: 8 cores / 2 workers


def test_parameter_server_inter_op_minimum_beats_a_lower_user_setting(tmp_path) -> None:
    config = LaunchConfig(command=("x.py",), nproc_per_node=2, ps=1, cpu=True, no_python=True)
    specs = plan_workers(
        config,
        local_ports=[4001, 4002, 4003, 4004],
        visible_gpus=[],
        cores=2,
        run_dir=str(tmp_path),
        attempt=0,
        base_env={"TF_NUM_INTEROP_THREADS": "1"},
    )
    assert {spec.env["TF_NUM_INTEROP_THREADS"] for spec in specs} == {"3"}
