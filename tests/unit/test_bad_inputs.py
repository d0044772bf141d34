"""Every user mistake a demanding user would make, through the real CLI: exit code 2, at most two lines on
stderr naming what was received, no traceback, and nothing written in the working directory. A case that a
subcommand's own file holds (test_launch_cli.py, test_bench.py, test_sbatch.py) is not repeated here."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from helpers.cli import cli

SCRIPT = "train.py"  # created in the working directory for every case

#: (argv, environment, text the error must contain). ``{script}`` is a real script in the working dir.
CASES: list[tuple[list[str], dict[str, str], str]] = [
    # ---- tfdist env: the environment variables it reads
    (["env"], {"TFDIST_CPU_REPLICAS": "abc"}, "TFDIST_CPU_REPLICAS='abc' is not an integer"),
    (["env"], {"TFDIST_CPU_REPLICAS": "0"}, "cpu_replicas=0 must be at least 1"),
    (["env"], {"TFDIST_BACKEND": "nccl"}, "TFDIST_BACKEND='nccl' is not a backend"),
    (["env"], {"TFDIST_STRATEGY": "bogus"}, "strategy kind 'bogus' is unknown"),
    (["env"], {"TFDIST_COMMUNICATION": "xyz"}, "communication 'xyz' is unknown"),
    (["env"], {"TFDIST_COLLECTIVE_TIMEOUT": "-1"}, "collective_timeout=-1.0 must be positive"),
    (["env"], {"TFDIST_COLLECTIVE_TIMEOUT": "nan"}, "TFDIST_COLLECTIVE_TIMEOUT='nan' is not a finite number"),
    (["env"], {"TFDIST_COLLECTIVE_TIMEOUT": "inf"}, "is not a finite number"),
    (["env"], {"TF_CONFIG": "{bad"}, "TF_CONFIG is not valid JSON"),
    (["env"], {"TF_CONFIG": '{"cluster": {}, "task": {"type": "worker", "index": 0}}'}, "TF_CONFIG"),
    (
        ["env"],
        {"TF_CONFIG": '{"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 3}}'},
        "index",
    ),
    (
        ["env"],
        {"TF_CONFIG": '{"cluster": {"worker": ["a:1"]}, "task": {"type": "boss", "index": 0}}'},
        "boss",
    ),
    (["env", "--bogus"], {}, "unrecognized arguments: --bogus"),
    # ---- tfdist launch
    (["launch", "--grace", "nan", "{script}"], {}, "'nan' is not a finite number of seconds"),
    (["launch", "--grace", "-1", "{script}"], {}, "--grace=-1.0 must be 0 or more"),
    (["launch", "--grace", "soon", "{script}"], {}, "'soon' is not a number of seconds"),
    (["launch", "--timeout", "0", "{script}"], {}, "--timeout=0.0 must be positive"),
    (["launch", "--timeout", "inf", "{script}"], {}, "'inf' is not a finite number of seconds"),
    (["launch", "--watchdog-timeout", "-5", "{script}"], {}, "--watchdog-timeout=-5.0 must be positive"),
    (["launch", "--watchdog-timeout", "nan", "{script}"], {}, "not a finite number of seconds"),
    (["launch", "--max-restarts", "x", "{script}"], {}, "'x' is not an integer"),
    (["launch", "--nnodes", "0", "{script}"], {}, "--nnodes=0 must be at least 1"),
    (["launch", "--nnodes", "2", "--hosts", "a", "{script}"], {}, "names 1 host(s)"),
    (["launch", "--nnodes", "2", "--hosts", "node1,node1", "{script}"], {}, "'node1' is listed twice"),
    (["launch", "--nnodes", "2", "--hosts", "Node1,node1", "{script}"], {}, "listed twice"),
    (
        ["launch", "--nnodes", "2", "--hosts", "a;rm -rf,b", "{script}"],
        {},
        "is not a host name or IP address",
    ),
    (["launch", "--nnodes", "2", "--hosts", "a,$(id)", "{script}"], {}, "'$(id)' is not a host name"),
    (
        ["launch", "--nnodes", "2", "--hosts", "localhost,node2", "{script}"],
        {},
        "'localhost' cannot be mixed",
    ),
    (["launch", "--nnodes", "2", "--hosts", "127.0.0.1,10.0.0.2", "{script}"], {}, "cannot be mixed"),
    (["launch", "--nnodes", "2", "--hosts=-bad,b", "{script}"], {}, "is not a host name"),
    (["launch", "--hosts", "a", "--hostfile", "x", "{script}"], {}, "--hosts and --hostfile were both given"),
    (["launch", "--backend", "mpi", "--ps", "1", "{script}"], {}, "cannot run parameter servers"),
    (
        ["launch", "--backend", "mpi", "--nnodes", "2", "--hosts", "nosuchnode1,b", "{script}"],
        {},
        "--hosts: 'nosuchnode1' does not resolve on",
    ),
    (
        ["launch", "--backend", "mpi", "--nnodes", "2", "--max-restarts", "1", "--hosts", "a,b", "{script}"],
        {},
        "--max-restarts with --backend mpi on several nodes needs --rdzv HOST:PORT",
    ),
    (["launch", "--bind-to", "socket", "{script}"], {}, "invalid choice"),
    (["launch", "--bind-to", "core", "--ps", "1", "{script}"], {}, "--bind-to core"),
    (["launch", "--run-dir", "afile", "{script}"], {}, "--run-dir 'afile' is a file"),
    (["launch", "-n", "2", "-m"], {}, "the following arguments are required: SCRIPT"),
    (
        ["launch", "-n", "2", "{script}"],
        {"SLURM_STEP_ID": "0", "SLURM_STEP_NUM_TASKS": "4"},
        "each of the 4 tasks",
    ),
    # ---- tfdist train
    (
        ["train", "--workers", "2", "--epochs", "1"],
        {"SLURM_STEP_ID": "0", "SLURM_STEP_NUM_TASKS": "2", "SLURM_STEP_NUM_NODES": "2"},
        "each of the 2 tasks of a Slurm step",
    ),
    (["train", "--lr", "nan"], {}, "'nan' is not a finite number"),
    (["train", "--lr", "inf"], {}, "'inf' is not a finite number"),
    (["train", "--lr", "0"], {}, "--lr=0.0 must be a positive, finite number"),
    (["train", "--lr", "-0.1"], {}, "must be a positive"),
    (["train", "--epochs", "0"], {}, "--epochs=0 must be at least 1"),
    (["train", "--epochs", "two"], {}, "'two' is not an integer"),
    (["train", "--batch-size-per-replica", "0"], {}, "--batch-size-per-replica=0"),
    (["train", "--global-batch-size", "0"], {}, "--global-batch-size=0 must be at least 1"),
    (
        ["train", "--global-batch-size", "64", "--batch-size-per-replica", "16"],
        {},
        "--global-batch-size and --batch-size-per-replica both given",
    ),
    (
        ["train", "--global-batch-size", "64", "--workers", "3"],
        {},
        "--global-batch-size=64 is not divisible by --workers=3",
    ),
    (
        [
            "slurm",
            "submit",
            "--nodes",
            "2",
            "--ntasks-per-node",
            "3",
            "--",
            "tfdist",
            "train",
            "--global-batch-size=64",
        ],
        {},
        "--global-batch-size=64 (in the job's command) is not divisible by the 6 replicas",
    ),
    (["train", "--workload", "gpt"], {}, "--workload 'gpt' is unknown"),
    (["train", "--dataset", "imagenet"], {}, "--dataset"),
    (["train", "--dataset", "folder:/no/such/dir"], {}, "does not exist"),
    (["train", "--workers", "2", "--dataset", "folder:/no/such/dir"], {}, "does not exist"),  # none starts
    (["train", "--workers", "2", "--dataset", "tfrecord:/no/such/*.tfrecord"], {}, "matches no file"),
    (["train", "--optimizer", "lamb"], {}, "--optimizer 'lamb' is unknown"),
    (["train", "--lr-scaling", "cubic"], {}, "--lr-scaling 'cubic' is unknown"),
    (["train", "--warmup-epochs", "-1"], {}, "--warmup-epochs=-1.0"),
    (["train", "--warmup-epochs", "nan"], {}, "is not a finite number"),
    (["train", "--checkpoint-every", "0"], {}, "--checkpoint-every=0"),
    (["train", "--steps-per-epoch", "0"], {}, "--steps-per-epoch=0"),
    (["train", "--mixed-precision", "fp8"], {}, "--mixed-precision 'fp8'"),
    (["train", "--weights", "nope.h5"], {}, "--weights 'nope.h5' does not exist"),
    (["train", "--workers", "0"], {}, "--workers=0 must be at least 1"),
    (["train", "--backend", "mpi"], {}, "--backend mpi needs --workers N"),
    (["train", "--workers", "2", "--backend", "gloo"], {}, "--backend='gloo'"),
    (["train", "--resume", "--run-dir", "runs/none"], {}, "--resume: no checkpoint to resume in"),
    (["train", "--run-dir", "afile"], {}, "--run-dir 'afile' is a file"),
    # ---- tfdist bench
    (["bench", "--workers", "1,1"], {}, "repeats a value"),
    (["bench", "--workers", ""], {}, "is empty"),
    (["bench", "--replicas", "x"], {}, "'x' is not a positive integer"),
    (["bench", "--backend", "tf,tf"], {}, "repeats a backend"),
    (["bench", "--steps", "0"], {}, "--steps"),
    (["bench", "--repeats", "0"], {}, "--repeats=0"),
    (["bench", "--warmup", "-1"], {}, "--warmup=-1"),
    (["bench", "--threads", "0"], {}, "--threads=0"),
    (["bench", "--run-timeout", "nan"], {}, "is not a finite number of seconds"),
    (["bench", "--input-delay-ms", "-1"], {}, "--input-delay-ms=-1.0"),
    (["bench", "--out", "afile"], {}, "--out 'afile' is a file"),
    # ---- tfdist slurm
    (["slurm", "submit", "--nodes", "3-2", "--", "python", "x.py"], {}, "MIN=3 is above MAX=2"),
    (
        ["slurm", "script", "--config", "types.toml", "--", "x"],
        {},
        "--config 'types.toml': nodes='two' must be a number of nodes N or a range MIN-MAX, e.g. 2-3.",
    ),
    (["slurm", "script", "--config", "bool.toml", "--", "x"], {}, "key 'requeue' must be a boolean, got 1"),
    (["slurm", "script", "--config", "list.toml", "--", "x"], {}, "key 'modules' must be a list of strings"),
    (["slurm", "bogus"], {}, "invalid choice"),
]

FILES = {
    SCRIPT: "print('hello')\n",
    "afile": "not a directory\n",
    "types.toml": 'nodes = "two"\n',
    "bool.toml": "requeue = 1\n",
    "list.toml": 'modules = "cuda"\n',
}


@pytest.mark.parametrize(("argv", "environ", "expected"), CASES, ids=[" ".join(c[0])[:60] for c in CASES])
def test_a_bad_input_is_one_line_and_exit_2(
    argv: list[str],
    environ: dict[str, str],
    expected: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    for name, text in FILES.items():
        (tmp_path / name).write_text(text)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    before = sorted(os.listdir(tmp_path))
    code, _, err = cli(capsys, *(a.replace("{script}", SCRIPT) for a in argv))
    lines = err.strip().splitlines()
    assert code == 2, err
    assert 1 <= len(lines) <= 2, err
    assert "Traceback" not in err
    assert expected in err, err
    assert sorted(os.listdir(tmp_path)) == before  # nothing half-written


def test_the_table_is_large_enough() -> None:
    assert len(CASES) >= 80
    assert {c[0][0] for c in CASES} >= {"env", "launch", "train", "bench", "slurm"}


def _api_cases() -> list[tuple[str, object, str]]:
    import tfdist
    from tfdist.bench.config import BenchConfig
    from tfdist.launcher import LaunchConfig
    from tfdist.slurm import SbatchSpec
    from tfdist.workloads.config import TrainConfig

    nan = float("nan")
    return [
        ("fit epochs=0", lambda: tfdist.fit(None, None, epochs=0), "epochs=0 must be a positive integer"),
        ("fit epochs=True", lambda: tfdist.fit(None, None, epochs=True), "epochs=True"),
        ("fit log_every=0", lambda: tfdist.fit(None, None, epochs=1, log_every=0), "log_every=0"),
        ("fit on_nan", lambda: tfdist.fit(None, None, epochs=1, on_nan="skip"), "on_nan='skip' is unknown"),
        (
            "fit lr_scaling",
            lambda: tfdist.fit(None, None, epochs=1, lr_scaling="cubic"),
            "lr_scaling='cubic'",
        ),
        ("fit keep", lambda: tfdist.fit(None, None, epochs=1, keep_checkpoints=0), "keep_checkpoints=0"),
        ("fit unknown kw", lambda: tfdist.fit(None, None, epochs=1, learning_rate=0.1), "tfdist.fit:"),
        ("strategy kind", lambda: tfdist.plan(kind="bogus"), "strategy kind 'bogus' is unknown"),
        ("strategy cpu_replicas", lambda: tfdist.plan(cpu_replicas=0), "cpu_replicas=0 must be at least 1"),
        ("strategy devices", lambda: tfdist.plan(devices=[-1]), "devices=[-1]"),
        ("strategy timeout", lambda: tfdist.plan(collective_timeout=-1), "collective_timeout=-1"),
        ("launch hosts", lambda: LaunchConfig(nnodes=2, hosts=("a", "a")), "'a' is listed twice"),
        ("launch grace nan", lambda: LaunchConfig(grace=nan), "--grace=nan is not a finite number"),
        ("bench steps", lambda: BenchConfig(out="b", steps=0), "--steps"),
        ("sbatch nodes", lambda: SbatchSpec(command=("x",), nodes=0), "--nodes=0"),
        ("train lr nan", lambda: TrainConfig(lr=nan), "--lr=nan must be a positive, finite number"),
        ("train on_nan", lambda: TrainConfig(on_nan="skip"), "--on-nan 'skip' is unknown"),
    ]


@pytest.mark.parametrize("index", range(17))
def test_a_bad_python_api_argument_is_a_config_error(index: int) -> None:
    from tfdist.errors import ConfigError

    name, call, expected = _api_cases()[index]
    with pytest.raises(ConfigError) as info:
        call()  # type: ignore[operator]
    assert expected in str(info.value), name
    assert "\n" not in str(info.value)


def test_the_api_table_is_complete() -> None:
    assert len(_api_cases()) == 17
