"""Flags with one meaning each: renamed flags keep their old spelling with a one-line note, a node range
reads in either common form, and every duration and size says its unit in the help."""

from __future__ import annotations

import pytest

from helpers.cli import cli
from tfdist.cli.spellings import rewrite

K8S = ("k8s", "manifest", "--image", "img:1")


@pytest.mark.parametrize(
    ("old", "new"),
    [
        (("--workers", "2"), ("--pods", "2")),
        (("--workers=2",), ("--pods", "2")),
        (("--pods", "2", "--gpus-per-worker", "4"), ("--pods", "2", "--gpus-per-pod", "4")),
        (
            ("--pods", "2", "--cpu", "4", "--memory=8Gi"),
            ("--pods", "2", "--cpus-per-pod", "4", "--memory-per-pod", "8Gi"),
        ),
    ],
)
def test_old_k8s_spellings_give_the_same_manifest_and_one_note_each(
    old: tuple[str, ...], new: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    command = ("--", "python", "train.py", "--workers", "3")
    code, expected, err = cli(capsys, *K8S, *new, *command)
    assert code == 0 and err == "", err
    code, got, err = cli(capsys, *K8S, *old, *command)
    assert code == 0 and got == expected
    notes = err.splitlines()
    assert len(notes) == sum(
        a.startswith(("--workers", "--gpus-per-worker", "--cpu", "--memory")) for a in old
    )
    assert all("is an old spelling: write --" in line for line in notes), err


def test_the_script_keeps_its_own_flags_of_the_same_name() -> None:
    argv = ["--workers", "2", "--", "python", "t.py", "--workers", "9"]
    assert rewrite(argv, {"--workers": "--pods"}, "prog") == [
        "--pods",
        "2",
        "--",
        "python",
        "t.py",
        "--workers",
        "9",
    ]


def test_a_check_below_the_cli_names_the_flag_the_user_can_type(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = cli(capsys, *K8S, "--pods", "2", "--nproc-per-pod", "4", "--gpus-per-pod", "2")
    assert code == 2 and out == ""
    assert "--gpus-per-pod 2" in err and "--gpus-per-worker" not in err


def test_old_names_are_not_in_the_help(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(capsys, "k8s", "manifest", "--help")
    assert code == 0
    assert all(new in out for new in ("--pods", "--gpus-per-pod", "--cpus-per-pod", "--memory-per-pod"))
    assert all(f"{old} " not in out for old in ("--workers", "--gpus-per-worker", "--cpu", "--memory"))


@pytest.mark.parametrize("typed", ["2:3", "2-3"])
def test_a_node_range_reads_in_either_form(typed: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = cli(capsys, "slurm", "script", "--nodes", typed, "--", "python", "train.py")
    assert code == 0 and "#SBATCH --nodes=2-3" in out, err
    from tfdist.cli import build_parser

    args = build_parser().parse_args(["launch", "--nnodes", typed, "--rdzv", "h:1", "train.py"])
    assert args.nnodes == "2:3"


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
    """``tfdist launch --log-dir`` and ``tfdist train --output-dir`` were the run directory's older names:
    they keep working, with one note each, and give what ``--run-dir`` gives; the script's own
    ``--log-dir`` stays the script's."""
    import argparse

    from tfdist.cli import launch as launch_cli
    from tfdist.cli import train as train_cli

    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers()
    launch_cli.register(sub)
    train_cli.register(sub)
    new = launch_cli.config_from_args(
        parser.parse_args(["launch", "--run-dir", "runs/a", "t.py", "--log-dir", "x"])
    )
    assert capsys.readouterr().err == ""
    old = launch_cli.config_from_args(
        parser.parse_args(["launch", "--log-dir=runs/a", "t.py", "--log-dir", "x"])
    )
    assert old == new and new.log_dir == "runs/a" and new.command == ("t.py", "--log-dir", "x")
    assert capsys.readouterr().err == "tfdist launch: --log-dir is an old spelling: write --run-dir.\n"
    assert parser.parse_args(["train", "--run-dir", "runs/b"]).output_dir == "runs/b"
    assert parser.parse_args(["train", "--output-dir", "runs/b"]).output_dir == "runs/b"
    assert "--output-dir is an old spelling: write --run-dir." in capsys.readouterr().err
    for command in ("launch", "train", "slurm submit"):
        code, out, _ = cli(capsys, *command.split(), "--help")
        assert code == 0 and "--run-dir" in out and "--log-dir" not in out and "--output-dir" not in out
