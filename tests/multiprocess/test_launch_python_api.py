"""``tfdist.launch()`` in Python does what ``tfdist launch`` does: a rendezvous and ``-H`` included."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tfdist.launcher.config import LaunchConfig

PROBE = Path(__file__).parents[1] / "helpers" / "env_probe.py"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("how", ["rdzv", "host_slots"])
def test_python_launch_meets_and_fans_out_as_the_cli_does(tmp_path: Path, how: str) -> None:
    out = tmp_path / "out"
    out.mkdir()
    where = {
        "rdzv": f"rdzv='127.0.0.1:{free_port()}', nproc_per_node=2",
        "host_slots": "host_slots='localhost:2'",
    }
    code = (
        "import tfdist\nfrom tfdist.launcher import LaunchConfig\n"
        f"r = tfdist.launch(LaunchConfig(command=({str(PROBE)!r}, {str(out)!r}), cpu=True, {where[how]}, "
        f"run_dir={str(tmp_path / 'run')!r}))\nprint('exit', r.exit_code, r.run_dir)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"exit 0 {tmp_path / 'run'}" in proc.stdout
    # The nodes met: the launcher printed the job it formed (at the endpoint -H chose, or the one given).
    assert "tfdist launch: job of 1 node(s) x 2 worker(s) formed at " in proc.stdout + proc.stderr
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [(r["TFDIST_RANK"], r["TFDIST_WORLD_SIZE"]) for r in ranks] == [("0", "2"), ("1", "2")]
    assert len(json.loads(ranks[0]["TF_CONFIG"])["cluster"]["worker"]) == 2
    if how == "host_slots":  # every host's run directory under the job's, its launcher's log beside
        assert (tmp_path / "run" / "localhost" / "launcher.log").is_file()


def test_a_python_caller_s_mistake_is_the_cli_s_one_line() -> None:
    from tfdist.errors import ConfigError

    with pytest.raises(ConfigError, match="a range of nodes needs --rdzv"):
        LaunchConfig(command=("t.py",), nnodes=1, max_nnodes=3)
    with pytest.raises(ConfigError, match="--rdzv assigns node ranks, hosts and ports itself"):
        from tfdist.launcher.membership import open_membership

        open_membership(LaunchConfig(command=("t.py",), rdzv="127.0.0.1:1", node_rank=1), {})
