"""`tfdist launch -H host:slots,...`: the host list, the command every host runs, and bad inputs."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from tfdist.cli import build_parser
from tfdist.cli.launch import config_from_args
from tfdist.launcher.config import LaunchConfig
from tfdist.launcher.fanout import commands, launch_argv, remote_shell
from tfdist.launcher.rendezvous import RendezvousSpec


def parsed(argv: list[str]) -> LaunchConfig:
    config: LaunchConfig = config_from_args(build_parser().parse_args(["launch", *argv]))
    return config


def test_every_host_runs_the_users_launch_with_the_jobs_nodes_and_rendezvous() -> None:
    config = parsed(
        ["-H", "n1:2,n2:2", "--ssh", "ssh -p 2222", "--cpu", "--backend=horovod", "train.py", "-n", "5"]
    )
    got = launch_argv(config, "n1:29400")
    # -n after the script is the script's own option and stays; -H and --ssh are this node's only.
    job = ["--nnodes", "2", "--rdzv", "n1:29400", "-n", "2"]
    assert got == [*job, "--backend", "horovod", "--cpu", "train.py", "-n", "5"]


@pytest.mark.parametrize(
    "argv",
    [
        ["--cpu", "train.py"],
        ["--ps", "1", "--chief", "--grace", "2.5", "--max-restarts", "3", "--timeout", "90", "t.py", "--x"],
        ["--backend", "mpi", "--bind-to", "none", "--watchdog-timeout", "30", "--no-prefix", "t.py"],
        ["--quiet-workers", "--strict", "--gpus-per-worker", "all", "--run-dir", "runs", "-m", "pkg.train"],
        ["--no-python", "./run.sh", "a", "b"],
    ],
)
def test_the_command_every_host_runs_parses_back_to_the_same_launch(argv: list[str]) -> None:
    """launch_argv is the CLI parser's inverse: what a host runs is the launch typed here, met at --rdzv."""
    given = parsed(["-H", "n1:2,n2:2", *argv])
    back = parsed(launch_argv(given, "n1:29400"))
    assert back == replace(given, host_slots=(), ssh="ssh", rdzv=RendezvousSpec("n1:29400"), nnodes=2)


def test_each_host_writes_its_own_run_directory_under_the_job_s() -> None:
    config = LaunchConfig(command=("t.py", "--run-dir", "mine"), host_slots="localhost:1,n2:1", run_dir="/r")
    started = dict(commands(config, "localhost:29400", "/w"))
    assert set(started) == {"localhost", "n2"}
    assert "--run-dir /r/localhost t.py --run-dir mine" in started["localhost"][-1]  # the script's own stays
    assert started["n2"][:2] == ["ssh", "n2"] and "--run-dir /r/n2 " in started["n2"][-1]


def test_the_token_travels_on_standard_input_never_in_a_command_line() -> None:
    shell = remote_shell("/venv/bin/python", "/work dir", {"TFDIST_X": "a b"}, ["--cpu", "t.py"])
    assert shell.startswith("read -r TFDIST_RDZV_TOKEN && export TFDIST_RDZV_TOKEN")
    assert "export TFDIST_X='a b'" in shell and "cd '/work dir'" in shell
    # The launcher is stopped when the connection (standard input, kept on fd 3) ends.
    assert "cat <&3 >/dev/null; kill -TERM $pid" in shell


def test_python_callers_get_h_from_the_launch_config(tmp_path: Path) -> None:
    """tfdist.launch(LaunchConfig(host_slots=...)) is the CLI's -H: a mistake is the same one line."""
    from tfdist.errors import ConfigError
    from tfdist.launcher import launch

    script = tmp_path / "train.py"
    script.write_text("print('never runs')\n")
    config = LaunchConfig(command=(str(script),), host_slots="localhost:2")
    assert config.nproc_per_node == 2
    with pytest.raises(ConfigError, match="-H names every host and its workers"):
        replace(config, rdzv="localhost:29400")
    with pytest.raises(ConfigError, match=r"no-such-host\.invalid"):
        launch(replace(config, host_slots="no-such-host.invalid:2"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train.py"]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["-H", "n1:2", "-n", "3"], "-n 3 and -H n1:2 disagree"),
        (["-H", "n1:2", "--rdzv", "n1:29400"], "-H names every host and its workers"),
        (["-H", "n1:2", "--nnodes", "2"], "-H names every host and its workers"),
        (["-H", "no-such-host.invalid:1,n2:1"], "no-such-host.invalid"),
        (["-H", "a:1,b:2"], "every host must run the same number of workers"),
    ],
)
def test_bad_h_is_one_line_and_exit_2(args: list[str], expected: str, tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("print('never runs')\n")
    proc = subprocess.run(
        [sys.executable, "-m", "tfdist", "launch", *args, "--cpu", str(script)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert proc.returncode == 2, proc.stderr
    assert expected in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train.py"]  # nothing written
