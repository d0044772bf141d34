"""TF_CONFIG parsing: valid clusters give the right rank/world size; every mistake is one ConfigError."""

from __future__ import annotations

import contextlib
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tfdist.env import TFConfigEnvironment, detect_environment
from tfdist.errors import ConfigError


def tf_config(cluster: object, task: object) -> dict[str, str]:
    return {"TF_CONFIG": json.dumps({"cluster": cluster, "task": task})}


TWO = {"worker": ["a:1000", "b:1000"]}
CHIEF = {"chief": ["c:1"], "worker": ["a:1", "b:1"]}
PS = {"chief": ["c:1"], "worker": ["a:1", "b:1"], "ps": ["p:1"]}


@pytest.mark.parametrize(
    ("cluster", "task", "rank", "world", "chief"),
    [
        (TWO, {"type": "worker", "index": 0}, 0, 2, True),
        (TWO, {"type": "worker", "index": 1}, 1, 2, False),
        (CHIEF, {"type": "chief", "index": 0}, 0, 3, True),
        (CHIEF, {"type": "worker", "index": 0}, 1, 3, False),
        (CHIEF, {"type": "worker", "index": 1}, 2, 3, False),
        (PS, {"type": "ps", "index": 0}, -1, 3, False),
        ({"worker": ["[::1]:80"]}, {"type": "worker", "index": 0}, 0, 1, True),
    ],
)
def test_valid_clusters(cluster: dict, task: dict, rank: int, world: int, chief: bool) -> None:
    env = TFConfigEnvironment.detect(tf_config(cluster, task))
    assert env is not None
    assert (env.rank, env.world_size, env.is_chief) == (rank, world, chief)
    assert env.role == task["type"]
    assert env.cluster_spec == cluster


def test_evaluator_is_not_part_of_the_training_cluster() -> None:
    env = TFConfigEnvironment.detect(
        tf_config({"worker": ["a:1"], "evaluator": ["e:1"]}, {"type": "evaluator", "index": 0})
    )
    assert env is not None and env.rank == -1 and "evaluator" not in env.cluster_spec


def test_unset_or_blank_is_not_detected() -> None:
    assert TFConfigEnvironment.detect({}) is None
    assert TFConfigEnvironment.detect({"TF_CONFIG": "  "}) is None


def test_tf_config_beats_slurm() -> None:
    environ = {
        **tf_config(TWO, {"type": "worker", "index": 1}),
        "SLURM_PROCID": "0",
        "SLURM_STEP_NODELIST": "n1",
        "SLURM_NTASKS": "1",
        "SLURM_JOB_ID": "5",
    }
    assert detect_environment(environ).kind == "tf_config"


def test_loopback_mixed_with_remote_hosts_warns() -> None:
    env = TFConfigEnvironment.detect(
        tf_config({"worker": ["localhost:1", "node2:1"]}, {"type": "worker", "index": 0})
    )
    assert env is not None and len(env.warnings) == 1 and "loopback" in env.warnings[0]
    pure = TFConfigEnvironment.detect(
        tf_config({"worker": ["127.0.0.1:1", "127.0.0.1:2"]}, {"type": "worker", "index": 0})
    )
    assert pure is not None and pure.warnings == ()


BAD = [
    ("not json", "{cluster:", "not valid JSON"),
    ("array", "[1, 2]", "must be a JSON object"),
    ("string", '"x"', "must be a JSON object"),
    ("no cluster", json.dumps({"task": {"type": "worker", "index": 0}}), "no 'cluster' key"),
    ("no task", json.dumps({"cluster": TWO}), "no 'task' key"),
    (
        "empty cluster",
        json.dumps({"cluster": {}, "task": {"type": "worker", "index": 0}}),
        "non-empty object",
    ),
    (
        "unknown role",
        json.dumps({"cluster": {"master": ["a:1"]}, "task": {"type": "master", "index": 0}}),
        "unknown role 'master'",
    ),
    (
        "index out of range",
        json.dumps({"cluster": TWO, "task": {"type": "worker", "index": 2}}),
        "out of range",
    ),
    ("negative index", json.dumps({"cluster": TWO, "task": {"type": "worker", "index": -1}}), "out of range"),
    (
        "index not int",
        json.dumps({"cluster": TWO, "task": {"type": "worker", "index": "0"}}),
        "not an integer",
    ),
    (
        "type not in cluster",
        json.dumps({"cluster": TWO, "task": {"type": "ps", "index": 0}}),
        "not in the cluster",
    ),
    (
        "task type unknown",
        json.dumps({"cluster": TWO, "task": {"type": "boss", "index": 0}}),
        "is not a role",
    ),
    ("task not object", json.dumps({"cluster": TWO, "task": "worker"}), "must be an object"),
    (
        "duplicate address",
        json.dumps({"cluster": {"worker": ["a:1", "a:1"]}, "task": {"type": "worker", "index": 0}}),
        "appears twice",
    ),
    (
        "duplicate across roles",
        json.dumps({"cluster": {"chief": ["a:1"], "worker": ["a:1"]}, "task": {"type": "chief", "index": 0}}),
        "appears twice",
    ),
    (
        "port zero",
        json.dumps({"cluster": {"worker": ["a:0"]}, "task": {"type": "worker", "index": 0}}),
        "must be HOST:PORT (a port 1-65535",
    ),
    (
        "port too big",
        json.dumps({"cluster": {"worker": ["a:70000"]}, "task": {"type": "worker", "index": 0}}),
        "must be HOST:PORT (a port 1-65535",
    ),
    (
        "port not number",
        json.dumps({"cluster": {"worker": ["a:http"]}, "task": {"type": "worker", "index": 0}}),
        "must be HOST:PORT",
    ),
    (
        "no port",
        json.dumps({"cluster": {"worker": ["a"]}, "task": {"type": "worker", "index": 0}}),
        "must be HOST:PORT",
    ),
    (
        "no host",
        json.dumps({"cluster": {"worker": [":80"]}, "task": {"type": "worker", "index": 0}}),
        "must be HOST:PORT",
    ),
    (
        "address not string",
        json.dumps({"cluster": {"worker": [80]}, "task": {"type": "worker", "index": 0}}),
        "must be HOST:PORT",
    ),
    (
        "role not list",
        json.dumps({"cluster": {"worker": "a:1"}, "task": {"type": "worker", "index": 0}}),
        "non-empty list",
    ),
    (
        "two chiefs",
        json.dumps({"cluster": {"chief": ["a:1", "b:1"]}, "task": {"type": "chief", "index": 0}}),
        "at most one chief",
    ),
    (
        "only ps",
        json.dumps({"cluster": {"ps": ["a:1"]}, "task": {"type": "ps", "index": 0}}),
        "no chief or worker",
    ),
]


@pytest.mark.parametrize(("label", "raw", "expected"), BAD, ids=[b[0] for b in BAD])
def test_bad_tf_config_is_one_clear_config_error(label: str, raw: str, expected: str) -> None:
    with pytest.raises(ConfigError) as info:
        detect_environment({"TF_CONFIG": raw})
    message = str(info.value)
    assert expected in message
    assert "TF_CONFIG" in message  # says where the value came from
    assert "\n" not in message


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3)
    ),
    max_leaves=10,
)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=60) | json_values.map(json.dumps))
def test_fuzz_tf_config_only_raises_config_error(raw: str) -> None:
    with contextlib.suppress(ConfigError):
        detect_environment({"TF_CONFIG": raw})


addresses = st.sampled_from(["a:1", "b:2", "localhost:3", "[::1]:4", "c:0", "d:x", "e:65536"])


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(["chief", "worker", "ps", "evaluator", "x"]),
        st.lists(addresses, max_size=3),
        max_size=4,
    ),
    st.fixed_dictionaries(
        {"type": st.sampled_from(["chief", "worker", "ps", "y"]), "index": st.integers(-2, 4)}
    ),
)
def test_fuzz_structured_tf_config(cluster: dict, task: dict) -> None:
    try:
        env = detect_environment(tf_config(cluster, task))
    except ConfigError:
        return
    assert env.kind == "tf_config"
    assert 0 <= env.task_index < len(env.cluster_spec.get(env.role, [None] * 99))
