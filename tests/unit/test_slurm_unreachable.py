"""Slurm's clients without a cluster behind them: one line naming the cause, exit 2, nothing written (the
real sbatch and scontrol where Slurm is installed, against a configuration whose controller never runs)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from helpers.cli import tfdist
from tfdist.slurm.commands import no_controller

#: A controller on a port nothing listens on; the clients give up on it after a second per try.
CONF = """ClusterName=absent
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=16998
TCPTimeout=1
MessageTimeout=1
NodeName=localhost CPUs=1
PartitionName=p Nodes=localhost Default=YES
AuthType=auth/none
"""


@pytest.mark.parametrize(
    ("output", "expected"),
    [
        ("sbatch: error: _establish_config_source: failed to fetch config", "found no Slurm configuration"),
        ("scontrol: fatal: Could not establish a configuration source", "found no Slurm configuration"),
        ("allocation failure: Unable to contact slurm controller (connect failure)", "cannot reach"),
        ("sbatch: error: Batch job submission failed: Invalid partition name specified", None),
    ],
)
def test_what_says_there_is_no_cluster(output: str, expected: str | None) -> None:
    line = no_controller("sbatch", output)
    assert (line is None) if expected is None else (line is not None and expected in line), line


def test_a_configuration_that_is_not_there_is_one_line(tmp_path: Path) -> None:
    conf = tmp_path / "missing.conf"
    proc = tfdist("slurm", "status", "4242", env={"SLURM_CONF": str(conf)}, timeout=60)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert f"SLURM_CONF={conf} is not a file" in proc.stderr


@pytest.mark.skipif(shutil.which("sbatch") is None, reason="Slurm's clients are not installed here")
def test_submit_and_status_without_a_controller_are_one_line_and_write_nothing(tmp_path: Path) -> None:
    conf = tmp_path / "slurm.conf"
    conf.write_text(CONF)
    env = {"SLURM_CONF": str(conf)}
    run_dir = tmp_path / "run"
    proc = tfdist("slurm", "submit", "--run-dir", str(run_dir), "--", "python", "x.py", env=env, timeout=90)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert f"sbatch cannot reach the Slurm controller named in {conf}" in proc.stderr
    assert not run_dir.exists()
    proc = tfdist("slurm", "status", "4242", env=env, timeout=90)
    assert proc.returncode == 2 and "scontrol cannot reach the Slurm controller" in proc.stderr, proc.stderr
    assert "MinJobAge" not in proc.stderr
