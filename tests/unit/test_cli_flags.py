"""Flags with one meaning each: one name for the run directory, a node range read in either common form,
and every duration and size says its unit in the help."""

from __future__ import annotations

import pytest

from helpers.cli import cli

K8S = ("k8s", "manifest", "--image", "img:1")


def test_a_check_below_the_cli_names_the_flag_the_user_can_type(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = cli(capsys, *K8S, "--pods", "2", "--nproc-per-pod", "4", "--gpus-per-pod", "2")
    assert code == 2 and out == ""
    assert "--gpus-per-pod 2" in err and "--gpus-per-worker" not in err


@pytest.mark.parametrize("typed", ["2:3", "2-3"])
def test_a_node_range_reads_in_either_form(typed: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = cli(capsys, "slurm", "script", "--nodes", typed, "--", "python", "train.py")
    assert code == 0 and "#SBATCH --nodes=2-3" in out, err
    from tfdist.cli import build_parser
    from tfdist.cli.launch import config_from_args

    args = build_parser().parse_args(["launch", "--nnodes", typed, "--rdzv", "h:1", "train.py"])
    assert config_from_args(args).node_range == (2, 3)


@pytest.mark.parametrize(
    ("command", "flag", "unit"),
    [
        (("launch",), "--grace", "SECONDS"),
        (("launch",), "--timeout", "SECONDS"),
        (("launch",), "--watchdog-timeout", "SECONDS"),
        (("launch",), "--rdzv-timeout", "SECONDS"),
        (("launch",), "--rdzv-last-call", "SECONDS"),
        (("bench",), "--run-timeout", "SECONDS"),
        (("slurm", "submit"), "--time", "MINUTES|HH:MM:SS"),
        (("slurm", "submit"), "--mem", "SIZE"),
    ],
)
def test_every_duration_says_its_unit(
    command: tuple[str, ...], flag: str, unit: str, capsys: pytest.CaptureFixture[str]
) -> None:
    _, out, _ = cli(capsys, *command, "--help")
    assert f"{flag} {unit}" in " ".join(out.split()), out


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (("slurm", "submit", "python", "train.py", "--nodes", "2"), "--nodes"),
        (("slurm", "script", "--time", "10", "python", "train.py", "--partition=gpu"), "--partition"),
        (("k8s", "manifest", "python", "train.py", "--pods", "2", "--image", "img:1"), "--pods"),
    ],
)
def test_a_flag_typed_after_the_command_is_one_line_not_a_silent_argument(
    argv: tuple[str, ...], flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = cli(capsys, *argv)
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert f"{flag} comes after the command" in err and " -- python train.py" in err


def test_an_unknown_flag_before_the_command_is_not_blamed_on_a_later_one(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``--workers 2`` (not a k8s flag): its value is no command, so ``--name`` after it is not "after the
    command"; argparse's own line names what is wrong."""
    argv = ("k8s", "manifest", "--image", "i:1", "--workers", "2", "--name", "t", "--", "x")
    code, _, err = cli(capsys, *argv)
    assert code == 2 and "comes after the command" not in err and "--pods" in err, err


@pytest.mark.parametrize(
    "argv",
    [
        ("slurm", "script", "--nodes", "2", "--", "python", "train.py", "--nodes", "3"),
        ("slurm", "script", "--nodes", "2", "python", "train.py", "--epochs", "3"),
        ("slurm", "script", "--job-name", "python", "--", "python", "train.py"),
    ],
)
def test_the_command_keeps_its_own_flags(argv: tuple[str, ...], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = cli(capsys, *argv)
    assert code == 0 and err == "", err
    assert "#SBATCH --nodes=2" in out or "--job-name=python" in out
    assert "-- python train.py" in out


def test_every_command_prints_its_help() -> None:
    """argparse %-formats every help text when --help runs: a stray % is a traceback for the user."""
    import argparse

    from tfdist.cli import build_parser

    def walk(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        return [parser, *(p for s in subs for child in s.choices.values() for p in walk(child))]

    parsers = walk(build_parser())
    assert len(parsers) > 15
    for parser in parsers:
        assert parser.format_help().startswith("usage: ")


def test_every_command_names_its_run_directory_run_dir(capsys: pytest.CaptureFixture[str]) -> None:
    """``--run-dir`` in every command; the script's own ``--log-dir`` stays the script's."""
    import argparse
    from dataclasses import replace

    from tfdist.cli import launch as launch_cli
    from tfdist.cli import train as train_cli
    from tfdist.launcher import LaunchConfig

    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers()
    launch_cli.register(sub)
    train_cli.register(sub)
    config = launch_cli.config_from_args(
        parser.parse_args(["launch", "--run-dir", "runs/a", "t.py", "--log-dir", "x"])
    )
    assert config.run_dir == "runs/a" and config.command == ("t.py", "--log-dir", "x")
    assert capsys.readouterr().err == ""
    # LaunchConfig's keyword as the Python API first documented it
    assert replace(config, log_dir="runs/c").run_dir == "runs/c" == LaunchConfig(log_dir="runs/c").run_dir
    assert parser.parse_args(["train", "--run-dir", "runs/b"]).run_dir == "runs/b"
    for command in ("launch", "train", "slurm submit"):
        code, out, _ = cli(capsys, *command.split(), "--help")
        assert code == 0 and "--run-dir" in out and "--log-dir" not in out and "--output-dir" not in out
