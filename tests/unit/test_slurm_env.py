"""Slurm node-list expansion and srun-task detection, from variables only."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tfdist.env import SlurmEnvironment, detect_environment
from tfdist.env.slurm import PORT_BASE, PORT_SLOT_WIDTH
from tfdist.errors import ConfigError
from tfdist.nodes import expand_nodelist, expand_tasks_per_node


@pytest.mark.parametrize(
    ("text", "hosts"),
    [
        ("n1", ["n1"]),
        ("n1,n2", ["n1", "n2"]),
        ("n[1-3]", ["n1", "n2", "n3"]),
        ("n[01-03,7],m5", ["n01", "n02", "n03", "n7", "m5"]),
        ("gpu[008-011]", ["gpu008", "gpu009", "gpu010", "gpu011"]),
        ("a[1-2]b[3-4]", ["a1b3", "a1b4", "a2b3", "a2b4"]),
        ("rack[1-2]-n[01-02]", ["rack1-n01", "rack1-n02", "rack2-n01", "rack2-n02"]),
        ("x[9-10]", ["x9", "x10"]),
        ("node-a.cluster,node[5]", ["node-a.cluster", "node5"]),
        ("c[1,3],d[2-3],e", ["c1", "c3", "d2", "d3", "e"]),
    ],
)
def test_expand_nodelist(text: str, hosts: list[str]) -> None:
    assert expand_nodelist(text) == hosts


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", "is empty"),
        ("n[1-3", "unclosed"),
        ("n1-3]", "without '['"),
        ("n[[1]]", "nested"),
        ("n[3-1]", "backwards"),
        ("n[a-b]", "not a number"),
        ("n[1-2],,m1", "empty host"),
        ("[1-2]", "empty host"),
        ("n[1-100000000]", "more than"),
    ],
)
def test_bad_nodelist(text: str, expected: str) -> None:
    with pytest.raises(ConfigError) as info:
        expand_nodelist(text)
    assert expected in str(info.value)


@pytest.mark.parametrize(
    ("text", "counts"),
    [("4", [4]), ("2(x3),1", [2, 2, 2, 1]), ("1,2,3", [1, 2, 3]), ("8(x2)", [8, 8])],
)
def test_expand_tasks_per_node(text: str, counts: list[int]) -> None:
    assert expand_tasks_per_node(text) == counts


@pytest.mark.parametrize("text", ["", "x", "2(x)", "0", "2(x0)", "2x3"])
def test_bad_tasks_per_node(text: str) -> None:
    with pytest.raises(ConfigError, match="SLURM_STEP_TASKS_PER_NODE"):
        expand_tasks_per_node(text)


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet="nab01-9[],x() ", max_size=30))
def test_fuzz_nodelist_only_raises_config_error(text: str) -> None:
    try:
        hosts = expand_nodelist(text)
    except ConfigError:
        return
    assert hosts and all(hosts)


def srun(**overrides: str) -> dict[str, str]:
    environ = {
        "SLURM_JOB_ID": "1234",
        "SLURM_PROCID": "3",
        "SLURM_LOCALID": "1",
        "SLURM_STEP_NUM_TASKS": "4",
        "SLURM_NTASKS": "4",
        "SLURM_STEP_NODELIST": "n[01-02]",
        "SLURM_STEP_TASKS_PER_NODE": "2(x2)",
    }
    environ.update(overrides)
    return {k: v for k, v in environ.items() if v != "<unset>"}


def test_srun_task_gives_rank_world_and_spec() -> None:
    env = detect_environment(srun())
    assert isinstance(env, SlurmEnvironment)
    assert (env.rank, env.world_size, env.local_rank, env.local_world_size) == (3, 4, 1, 2)
    port = PORT_BASE + 234 * PORT_SLOT_WIDTH
    assert env.cluster_spec == {
        "worker": [f"n01:{port}", f"n01:{port + 1}", f"n02:{port}", f"n02:{port + 1}"]
    }
    assert not env.is_chief


def test_all_tasks_agree_on_the_spec() -> None:
    specs = {
        str(detect_environment(srun(SLURM_PROCID=str(r), SLURM_LOCALID=str(r % 2))).cluster_spec)
        for r in range(4)
    }
    assert len(specs) == 1


def test_tfdist_port_overrides_the_derived_port() -> None:
    env = detect_environment(srun(TFDIST_PORT="5000"))
    assert env.cluster_spec["worker"][:2] == ["n01:5000", "n01:5001"]


def test_ntasks_fallback_and_missing_localid() -> None:
    env = detect_environment(srun(SLURM_STEP_NUM_TASKS="<unset>", SLURM_LOCALID="<unset>"))
    assert (env.world_size, env.local_rank) == (4, 1)


def test_batch_script_without_srun_is_local() -> None:
    assert detect_environment({"SLURM_JOB_ID": "5", "SLURM_NTASKS": "2"}).kind == "local"


def test_gpu_ids_and_scheduler_binding() -> None:
    env = detect_environment(srun(CUDA_VISIBLE_DEVICES="2,3", SLURM_GPUS_PER_TASK="1"))
    assert env.gpu_ids == ("2", "3") and env.gpus_bound_by_scheduler


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({"SLURM_PROCID": "4"}, "SLURM_PROCID=4 but SLURM_STEP_NUM_TASKS=4"),
        ({"SLURM_PROCID": "x"}, "SLURM_PROCID='x' is not an integer"),
        ({"SLURM_STEP_NODELIST": "n[01-"}, "unclosed"),
        ({"SLURM_STEP_TASKS_PER_NODE": "2(x3)"}, "gives 3 node count(s) but SLURM_STEP_NODELIST names 2"),
        ({"SLURM_STEP_TASKS_PER_NODE": "3,2"}, "adds up to 5 tasks"),
        ({"SLURM_LOCALID": "2"}, "SLURM_LOCALID=2 but this node runs 2"),
        ({"SLURM_JOB_ID": "<unset>"}, "set TFDIST_PORT"),
        ({"TFDIST_PORT": "65535"}, "passes port 65535"),
        ({"TFDIST_PORT": "abc"}, "TFDIST_PORT='abc' is not an integer"),
        ({"SLURM_STEP_NUM_TASKS": "0"}, "below 1"),
    ],
)
def test_inconsistent_slurm_variables(overrides: dict[str, str], expected: str) -> None:
    with pytest.raises(ConfigError) as info:
        detect_environment(srun(**overrides))
    assert expected in str(info.value)
