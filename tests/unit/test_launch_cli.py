"""`tfdist launch` bad input: one line on stderr, exit code 2, nothing started or written."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tfdist.cli import main


@pytest.fixture
def script(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "train.py"
    path.write_text("print('hi')\n")
    (tmp_path / "pkgdir").mkdir()
    return str(path)


CASES = [
    (["-n", "0", "{script}"], "--nproc-per-node=0"),
    (["-n", "-1", "{script}"], "--nproc-per-node=-1"),
    (["-n", "abc", "{script}"], "'abc' is not an integer"),
    ([], "the following arguments are required: SCRIPT"),
    (["-n", "2", "missing.py"], "script 'missing.py' does not exist"),
    (["-n", "2", "-m", "no_such_module_xyz"], "module 'no_such_module_xyz' is not importable"),
    (["-n", "2", "-m", "no_such_pkg.sub"], "module 'no_such_pkg.sub' is not importable"),
    (["-n", "2", "pkgdir"], "is a directory"),
    (["--nnodes", "2", "{script}"], "needs the node addresses"),
    (["--nnodes", "2", "--hosts", "a,b,c", "{script}"], "names 3 host(s)"),
    (["--nnodes", "2", "--hosts", "a,b", "--node-rank", "2", "{script}"], "--node-rank=2 must be in 0..1"),
    (["--nnodes", "2", "--hosts", "a,", "{script}"], "empty entry"),
    (["--base-port", "70000", "{script}"], "--base-port=70000 is not a port"),
    (["--base-port", "0", "{script}"], "--base-port=0 is not a port"),
    (["--base-port", "http", "{script}"], "'http' is not an integer"),
    (["--base-port", "65535", "-n", "2", "{script}"], "passes port 65535"),
    (["--ps", "-1", "{script}"], "--ps=-1"),
    (["--ps", "1"], "the following arguments are required: SCRIPT"),
    (["--max-restarts", "-1", "{script}"], "--max-restarts=-1"),
    (["--watchdog-timeout", "soon", "{script}"], "'soon' is not a number of seconds (or off)"),
    (["--timeout", "-5", "{script}"], "--timeout=-5"),
    (["--bogus", "{script}"], "unrecognized arguments: --bogus"),
    (["--gpus-per-worker", "2", "{script}"], "invalid choice"),
    (["--backend", "nccl", "{script}"], "--backend='nccl'"),
    (["--hostfile", "nope.txt", "--nnodes", "2", "{script}"], "--hostfile 'nope.txt' cannot be read"),
]


@pytest.mark.parametrize(("argv", "expected"), CASES, ids=[" ".join(c[0]) or "no-args" for c in CASES])
def test_bad_launch_input(
    argv: list[str], expected: str, script: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    before = set(os.listdir(tmp_path))
    with pytest.raises(SystemExit) as info:
        raise SystemExit(main(["launch", *[a.format(script=script) for a in argv]]))
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert expected in err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert set(os.listdir(tmp_path)) == before  # no run directory, nothing started


def test_script_arguments_pass_through_untouched(script: str) -> None:
    from tfdist.cli import build_parser
    from tfdist.cli.launch import config_from_args

    args = build_parser().parse_args(["launch", "-n", "2", "--cpu", script, "-n", "5", "--lr", "0.1"])
    config = config_from_args(args)
    assert config.command == (script, "-n", "5", "--lr", "0.1")
    assert config.nproc_per_node == 2


def test_module_form(script: str) -> None:
    from tfdist.cli import build_parser
    from tfdist.cli.launch import config_from_args

    config = config_from_args(build_parser().parse_args(["launch", "-m", "json.tool", "--help"]))
    assert config.command == ("-m", "json.tool", "--help")


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"#!/bin/bash\necho hi\n", "is not Python (a script for /bin/bash)"),
        (b"\x7fELF\x02\x01\x01\x00\x00", "is not Python (a binary file)"),
    ],
)
def test_a_script_that_is_not_python_is_one_line(content: bytes, expected: str, tmp_path, capsys) -> None:
    from tfdist.cli import main

    script = tmp_path / "train.sh"
    script.write_bytes(content)
    code = main(["launch", "-n", "2", "--cpu", "--run-dir", str(tmp_path / "run"), str(script)])
    err = capsys.readouterr().err
    assert code == 2 and expected in err and "Hint: for another program use tfdist launch --no-python" in err
    assert err.count("\n") == 1 and not (tmp_path / "run").exists()


def test_launch_inside_a_multi_task_slurm_step_says_what_to_write(tmp_path, capsys, monkeypatch) -> None:
    from tfdist.cli import main

    monkeypatch.setenv("SLURM_STEP_ID", "0")
    monkeypatch.setenv("SLURM_STEP_NUM_TASKS", "4")
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    code = main(["launch", "-n", "2", "--cpu", "--run-dir", str(tmp_path / "run"), str(script)])
    err = capsys.readouterr().err
    assert code == 2 and "each of the 4 tasks of a Slurm step" in err
    assert "srun tfdist run -- python train.py" in err and not (tmp_path / "run").exists()
