"""``tfdist bench --cpus-per-host``: each node's cores, the commands that pin them, and where the CPU of a
run's threads goes (pure parts: no process is started)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tfdist.bench.config import BenchConfig
from tfdist.bench.pin import host_cpus
from tfdist.bench.plan import RunSpec, node_commands, pinned, plan_bench
from tfdist.bench.stats import _thread_medians
from tfdist.bench.threads import cpu_seconds, per_step_ms, role, totals
from tfdist.errors import ConfigError

ON = "scripts/testhosts.sh exec {host} --"
KW = {"python": "py", "threads": 1, "gpus": 0, "run_dir": "/r", "log_path": "/l/x.log", "timeout": 60.0}


@pytest.mark.parametrize(
    ("index", "count", "available", "cpus"),
    [
        (0, 1, [0, 1], (0,)),
        (1, 1, [0, 1], (1,)),  # two hosts on one 2-core machine: a core each
        (2, 1, [0, 1], (0,)),  # wraps
        (3, 2, [4, 5, 6, 7], (6, 7)),  # the host's own numbers
        (1, 2, [0, 1, 2], (0, 2)),
        (0, 2, {3, 1}, (1, 3)),
    ],
)
def test_host_cpus(index: int, count: int, available: list[int], cpus: tuple[int, ...]) -> None:
    assert host_cpus(index, count, available) == cpus


def test_host_cpus_refuses_more_than_the_host_has() -> None:
    with pytest.raises(ConfigError, match="--cpus-per-host 3: this host lets the benchmark use 2 core"):
        host_cpus(0, 3, [0, 1])


def test_every_node_command_is_pinned_to_its_own_cores() -> None:
    spec = RunSpec(2, 1, "mpi", nodes=2)
    commands = node_commands(
        spec, ("-m", "prog"), hosts=("n1", "n2"), on_host=ON, port=1, cpus_per_host=1, **KW
    )  # type: ignore[arg-type]
    for rank, command in enumerate(commands):
        after_host = list(command.argv[4:10])
        assert after_host == ["py", "-m", "tfdist.bench.pin", str(rank), "1", "--"]
        assert command.argv[10:14] == ("py", "-m", "tfdist", "launch")
    (one,) = node_commands(
        RunSpec(1, 1, "local"), ("-m", "prog"), hosts=("n1",), on_host="", port=1, cpus_per_host=2, **KW
    )  # type: ignore[arg-type]
    assert one.argv == (*pinned("py", 0, 2), "py", "-u", "-m", "prog")
    assert pinned("py", 1, None) == ()


def test_the_core_budget_sets_the_threads_and_is_checked(tmp_path: Path) -> None:
    config = BenchConfig(out=str(tmp_path), hosts=("n1", "n2"), nodes=(2,), on_host=ON, cpus_per_host=1)
    assert plan_bench(config, cores=config.cpus_per_host or 8, gpus=0).threads == 1
    with pytest.raises(ConfigError, match="--cpus-per-host=0 must be at least 1 core"):
        BenchConfig(out=str(tmp_path), cpus_per_host=0)


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["/v/bin/python", "-m", "tfdist", "launch", "-n", "1", "t.py"], "launcher"),
        (["/v/bin/python", "-u", "-m", "tfdist.worker.mpirun", "t.py"], "rank"),
        (["python3", "-m", "tfdist.bench.worker", "{}"], "rank"),
        (["/v/bin/python", "-m", "tfdist.mpi.hydra", "300", "--", "hydra_pmi_proxy"], "proxy-retry"),
        (["/v/bin/hydra_pmi_proxy", "--control-port", "n1:1"], "hydra_pmi_proxy"),
        (["/v/bin/mpiexec.hydra", "-n", "2"], "mpiexec"),
        (["sh", "-c", "x"], "sh"),
        ([], "other"),
    ],
)
def test_process_roles(argv: list[str], expected: str) -> None:
    assert role(argv) == expected


def test_cpu_seconds_reads_past_a_name_with_spaces() -> None:
    fields = " ".join(["S"] + ["0"] * 10 + ["250", "50"] + ["0"] * 30)
    assert cpu_seconds(f"42 (tf (Compute) 1) {fields}") == pytest.approx(300 / 100)


def test_cpu_ms_per_step_within_the_window() -> None:
    threads = {(1, 1): ("rank/tf_Compute", 1.0, 0.1), (1, 2): ("rank/tf_Compute", 0.5, 0.0)}
    start = totals({**threads, (2, 3): ("launcher/py", 0.2, 0.0)})
    assert start == {
        "rank/tf_Compute": 1.5,
        "rank/tf_Compute waiting": 0.1,
        "launcher/py": 0.2,
        "launcher/py waiting": 0.0,
    }
    snapshots = [(0.0, {"rank/x": 0.0}), (1.0, start), (11.0, {**start, "rank/tf_Compute": 6.5}), (20.0, {})]
    # 5 CPU seconds in 10 wall seconds: half a core, 50 ms of each 100 ms step; nothing else moved.
    assert per_step_ms(snapshots, (0.5, 12.0), 0.1) == {"rank/tf_Compute": 50.0}
    assert per_step_ms(snapshots, (0.5, 1.5), 0.1) == {}
    assert _thread_medians([{"node0": {"a": 1.0}}, None, {"node0": {"a": 3.0, "b": 2.0}}]) == {
        "node0": {"a": 2.0, "b": 2.0}
    }
