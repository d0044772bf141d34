"""Help for mistakes, through the real command line: a misspelt command, choice or flag names the nearest
one (one line, exit 2); flags of ``tfdist launch`` typed after the script go to the script with a one-line
note showing where they belong; more bench workers than cores is refused unless asked, nothing written; and
the ``--help`` of the main commands ends with examples that parse."""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import Any

import pytest

from helpers.cli import tfdist
from tfdist.cli import build_parser
from tfdist.cli.guards import flags_after_script


def _choices(parser: Any) -> str:
    """The sub-command names of ``parser`` as argparse lists them."""
    sub = next(a for a in parser._actions if a.choices and not a.option_strings)
    return ", ".join(map(repr, sub.choices))


def _one_line_exit_2(argv: list[str], cwd: Path) -> str:
    """Run ``tfdist ARGV`` in ``cwd``: exit code 2, nothing on stdout, one line on stderr, nothing written."""
    proc = tfdist(*argv, cwd=cwd, timeout=60)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stdout == "" and proc.stderr.count("\n") == 1, proc.stderr
    assert os.listdir(cwd) == []
    return proc.stderr.rstrip("\n")


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (
            ["lauch", "x.py"],
            "tfdist: error: argument COMMAND: invalid choice: 'lauch' (did you mean launch? choose from "
            "{commands}) (see tfdist --help)",
        ),
        (
            ["slurm", "sbumit", "--", "python", "x.py"],
            "tfdist slurm: error: argument ACTION: invalid choice: 'sbumit' (did you mean submit? "
            "choose from 'script', 'submit', 'status', 'cancel', 'logs') (see tfdist slurm --help)",
        ),
        (
            ["launch", "--cpus", "x.py"],
            "tfdist launch: error: unrecognized arguments: --cpus (did you mean --cpu?) "
            "(see tfdist launch --help)",
        ),
        (
            ["launch", "--cpus", "--rdvz", "h:1", "x.py"],
            "tfdist launch: error: unrecognized arguments: --cpus --rdvz (did you mean --cpu for --cpus, "
            "--rdzv for --rdvz?) (see tfdist launch --help)",
        ),
        (
            ["launch", "--bind-to", "cores", "x.py"],
            "tfdist launch: error: argument --bind-to: invalid choice: 'cores' (did you mean core? "
            "choose from 'auto', 'core', 'none') (see tfdist launch --help)",
        ),
        (
            ["env", "--jsn"],
            "tfdist env: error: unrecognized arguments: --jsn (did you mean --json?) (see tfdist env --help)",
        ),
        (
            ["slurm", "submit", "--nodez", "2", "--", "python", "x.py"],
            "tfdist slurm submit: error: unrecognized arguments: --nodez (did you mean --nodes?) "
            "(see tfdist slurm submit --help)",
        ),
        # Nothing close: argparse's own words, from the parser that owns the flag.
        (
            ["launch", "--zzz", "x.py"],
            "tfdist launch: error: unrecognized arguments: --zzz (see tfdist launch --help)",
        ),
        (
            ["xyz"],
            "tfdist: error: argument COMMAND: invalid choice: 'xyz' (choose from {commands}) "
            "(see tfdist --help)",
        ),
    ],
)
def test_a_misspelling_names_the_nearest_command_choice_or_flag(
    argv: list[str], line: str, tmp_path: Path
) -> None:
    assert _one_line_exit_2(argv, tmp_path) == line.format(commands=_choices(build_parser()))


def test_launch_flags_after_the_script_go_to_it_with_a_note(tmp_path: Path) -> None:
    (tmp_path / "quickstart.py").write_text("import sys\nprint('argv', sys.argv[1:])\n")
    proc = tfdist("launch", "quickstart.py", "-n", "2", "--cpu", cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stderr.splitlines()[0] == (
        "tfdist launch: -n 2 --cpu come after quickstart.py, so they go to the script, not to tfdist launch. "
        "Hint: put them first: tfdist launch -n 2 --cpu quickstart.py"
    )
    assert sum("come after" in line for line in proc.stderr.splitlines()) == 1
    assert proc.stdout.splitlines() == ["[w0]: argv ['-n', '2', '--cpu']"]  # one worker, the words its own


@pytest.mark.parametrize(
    ("before", "after", "note"),
    [
        (
            [],
            ["--epochs", "3", "--nnodes=2"],
            "tfdist launch: --nnodes=2 comes after t.py, so it goes to the script, not to tfdist launch. "
            "Hint: put it first: tfdist launch --nnodes=2 t.py --epochs 3",
        ),
        (
            ["--cpu", "--run-dir", "r"],
            ["-n", "2", "--lr", "0.1", "--strict"],
            "tfdist launch: -n 2 --strict come after t.py, so they go to the script, not to tfdist launch. "
            "Hint: put them first: tfdist launch -n 2 --strict --cpu --run-dir r t.py --lr 0.1",
        ),
        (["-m"], ["--grace", "5"], "Hint: put it first: tfdist launch --grace 5 -m t.py"),
        (["-n", "2"], ["--nproc-per-node", "5"], ""),  # given before the script: the script's own flag
        ([], ["--epochs", "3", "--help"], ""),  # the script's --help
        ([], ["--nodes", "2", "-N", "3"], ""),  # not flags of tfdist launch
    ],
)
def test_the_note_names_only_launch_flags_and_the_command_that_gives_them(
    before: list[str], after: list[str], note: str
) -> None:
    parser = next(a for a in build_parser()._actions if a.choices and not a.option_strings).choices["launch"]
    got = flags_after_script("tfdist launch", before, "t.py", after, parser)
    assert got.endswith(note) and (got == "") == (note == "")


def test_more_bench_workers_than_cores_is_refused_and_nothing_written(tmp_path: Path) -> None:
    cores = os.cpu_count() or 1
    fitting = ",".join(sorted({"1", str(cores)}, key=int))
    for out in ([], ["--out", str(tmp_path / "bench-out")]):
        line = _one_line_exit_2(["bench", "--workers", f"1,{cores + 1}", *out], tmp_path)
        assert line == (
            f"tfdist bench: error: --workers 1,{cores + 1} asks for {cores + 1} worker processes on this "
            f"machine's {cores} CPU cores: they would time-slice the cores, so the table would measure "
            f"oversubscription, not scaling. Hint: --workers {fitting}, or add --oversubscribe to measure it "
            "anyway."
        )


def test_oversubscribe_asks_for_more_workers_than_cores(tmp_path: Path) -> None:
    from tfdist.cli.bench import config_from_args

    many = (os.cpu_count() or 1) + 1
    argv = ["bench", "--workers", f"1,{many}", "--oversubscribe", "--out", str(tmp_path / "o")]
    assert config_from_args(build_parser().parse_args(argv)).workers == (1, many)
    assert os.listdir(tmp_path) == []


COMMANDS_WITH_EXAMPLES = (("launch",), ("train",), ("slurm", "submit"), ("bench",), ("env",))


@pytest.mark.parametrize("command", COMMANDS_WITH_EXAMPLES, ids=" ".join)
def test_help_ends_with_examples_that_parse(
    command: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    proc = tfdist(*command, "--help", timeout=60)
    assert proc.returncode == 0 and proc.stderr == ""
    examples = proc.stdout.split("\nexamples:\n\n")[1].splitlines()
    assert 1 <= len(examples) <= 2
    for example in examples:
        words = shlex.split(example.partition("#")[0])
        assert words[: 1 + len(command)] == ["tfdist", *command], example
        args = build_parser().parse_args(words[1:])  # exit 2 on a flag the parser does not know
        assert args.subcommand == command[0]
    assert capsys.readouterr().err == ""  # no note: every flag of an example is where it belongs
