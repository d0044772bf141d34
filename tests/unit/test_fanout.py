"""`tfdist launch -H host:slots,...`: the host list, the command every host runs, and bad inputs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tfdist.launch.fanout import launch_args, per_host_log_dir, remote_shell
from tfdist.nodes import parse_host_slots


def test_every_host_runs_the_users_launch_with_the_jobs_nodes_and_rendezvous() -> None:
    argv = ["-H", "n1:2,n2:2", "--ssh", "ssh -p 2222", "--cpu", "--backend=horovod", "train.py", "-n", "5"]
    hosts = parse_host_slots("n1:2,n2:2")
    got = launch_args(argv, "train.py", hosts, "n1:29400")
    # -n after the script is the script's own option and stays; -H and --ssh are this node's only.
    job = ["--nnodes", "2", "--rdzv", "n1:29400", "-n", "2"]
    assert got == [*job, "--cpu", "--backend=horovod", "train.py", "-n", "5"]


def test_each_host_writes_its_own_run_directory() -> None:
    assert per_host_log_dir(["--log-dir", "runs", "t.py"], "n2") == ["--log-dir", "runs/n2", "t.py"]
    assert per_host_log_dir(["--log-dir=runs", "t.py"], "n2") == ["--log-dir=runs/n2", "t.py"]
    assert per_host_log_dir(["t.py", "--log-dir", "x"], "n2")[2] == "x/n2"  # (first occurrence only)


def test_the_token_travels_on_standard_input_never_in_a_command_line() -> None:
    shell = remote_shell("/venv/bin/python", "/work dir", {"TFDIST_X": "a b"}, ["--cpu", "t.py"])
    assert shell.startswith("read -r TFDIST_RDZV_TOKEN && export TFDIST_RDZV_TOKEN")
    assert "export TFDIST_X='a b'" in shell and "cd '/work dir'" in shell
    # The launcher is stopped when the connection (standard input, kept on fd 3) ends.
    assert "cat <&3 >/dev/null; kill -TERM $pid" in shell


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
