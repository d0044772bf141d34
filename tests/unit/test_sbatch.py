"""Job scripts: golden files for the CPU, GPU, virtualenv and container variants; bad input."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.cli import cli
from tfdist.errors import ConfigError
from tfdist.slurm import SbatchSpec, render_sbatch

GOLDEN = Path(__file__).parent.parent / "golden"
COMMAND = ("python", "-m", "tfdist", "train", "--epochs", "3", "--run-dir", "runs/it's here")

VARIANTS = {
    "cpu": SbatchSpec(
        command=COMMAND,
        nodes=2,
        ntasks_per_node=2,
        cpus_per_task=4,
        mem="16G",
        time="0:30:00",
        partition="cpu",
        exports={"TFDIST_COMMUNICATION": "ring"},
    ),
    "gpu": SbatchSpec(
        command=COMMAND,
        nodes=2,
        gpus_per_node=4,
        cpus_per_task=8,
        time="1-00:00:00",
        account="proj42",
        qos="normal",
        constraint="a100",
        output="logs/%x-%j.out",
        error="logs/%x-%j.err",
        exports={"XLA_FLAGS": "--xla_gpu_autotune_level=2"},
        extra_sbatch=("--exclusive",),
    ),
    "venv": SbatchSpec(
        command=COMMAND,
        gpus_per_node=2,
        per_node=True,
        modules=("cuda/12.4", "cudnn"),
        venv="/home/me/envs/tf",
        gres=False,
    ),
    "container": SbatchSpec(
        command=COMMAND,
        nodes=4,
        gpus_per_node=8,
        container="/images/tf-2.21.sif",
        binds=("/scratch:/scratch", "/data"),
        requeue=False,
        signal="USR2@300",
    ),
    "mpi": SbatchSpec(
        command=("python", "train.py"),
        nodes=2,
        ntasks_per_node=2,
        nodelist="node[1-2]",
        backend="mpi",
    ),
    "horovod": SbatchSpec(
        command=("python", "hvd_train.py"), nodes=3, backend="horovod", horovod_shim=True, mpi="pmix"
    ),
}


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_golden_scripts(name: str) -> None:
    text = render_sbatch(VARIANTS[name])
    path = GOLDEN / f"{name}.sbatch"
    if os.environ.get("UPDATE_GOLDEN") == "1":  # regenerate with UPDATE_GOLDEN=1
        path.write_text(text)
    assert text == path.read_text()


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is needed to syntax-check scripts")
@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_scripts_are_valid_bash(name: str, tmp_path: Path) -> None:
    script = tmp_path / "job.sh"
    script.write_text(render_sbatch(VARIANTS[name]))
    assert subprocess.run(["bash", "-n", str(script)], capture_output=True, timeout=10).returncode == 0


def test_proxy_variables_are_unset_only_for_multi_task_jobs() -> None:
    assert "unset http_proxy" not in render_sbatch(SbatchSpec(command=("python", "x.py")))
    assert "unset http_proxy" in render_sbatch(VARIANTS["cpu"])


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"nodes": 0}, "--nodes=0"),
        ({"nodes": -2}, "--nodes=-2"),
        ({"time": "1h"}, "--time='1h' is not a Slurm time"),
        ({"time": "25:61:00:00"}, "is not a Slurm time"),
        ({"mem": "16GB"}, "--mem='16GB' is not a Slurm size"),
        ({"gpus_per_task": 1}, "on a CPU-only spec"),
        ({"per_node": True}, "asks for no GPUs"),
        ({"job_name": "my job"}, "cannot contain spaces"),
        ({"partition": "gpu\n#SBATCH --x"}, "newline or control character"),
        ({"command": ("python", "a\nb.py")}, "newline or control character"),
        ({"exports": {"BAD-NAME": "1"}}, "not a valid variable name"),
        ({"command": ()}, "no command to run"),
        ({"cpus_per_task": 0}, "--cpus-per-task=0"),
        ({"backend": "nccl"}, "--backend='nccl' is not a backend"),
        ({"backend": "mpi", "mpi": "none"}, "--mpi=none cannot start the ranks of --backend mpi"),
        ({"mpi": "pmi 2"}, "is not an MPI plugin name"),
        ({"nodelist": "node1 node2"}, "cannot contain spaces"),
    ],
)
def test_bad_specs(kwargs: dict, expected: str) -> None:
    kwargs.setdefault("command", ("python", "x.py"))
    with pytest.raises(ConfigError) as info:
        SbatchSpec(**kwargs)
    assert expected in str(info.value)


def test_cli_script_prints_the_rendered_spec(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(
        capsys, "slurm", "script", "--nodes", "2", "--gpus-per-node", "4", "--", "python", "train.py"
    )
    assert code == 0
    # without --venv / --container the task wrapper runs under the interpreter that wrote the script
    expected = SbatchSpec(command=("python", "train.py"), nodes=2, gpus_per_node=4, python=sys.executable)
    assert out == render_sbatch(expected)


def test_cli_config_file_with_flag_override(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "cluster.toml"
    config.write_text(
        'partition = "gpu"\ntime = "02:00:00"\ngpus-per-node = 4\nmodule = ["cuda"]\n'.replace(
            "module", "modules"
        )
    )
    code, out, _ = cli(
        capsys, "slurm", "script", "--config", str(config), "--time", "00:10:00", "--", "python", "t.py"
    )
    assert code == 0
    assert "#SBATCH --partition=gpu" in out and "#SBATCH --time=00:10:00" in out and "module load cuda" in out


@pytest.mark.parametrize(
    ("value", "expected"), [("3", "#SBATCH --nodes=3\n"), ('"2-3"', "#SBATCH --nodes=2-3\n")]
)
def test_a_config_file_takes_a_node_count_or_range(
    value: str, expected: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "cluster.toml"
    config.write_text(f"nodes = {value}\n")
    code, out, err = cli(capsys, "slurm", "script", "--config", str(config), "--", "python", "t.py")
    assert code == 0, err
    assert expected in out


#: Config files in the working directory of every bad-input case.
CONFIGS = {"bad.toml": "partition = \n", "unknown.toml": 'colour = "blue"\n'}


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["slurm", "script", "--time", "soon", "--", "x"], "--time='soon'"),
        (["slurm", "script", "--mem", "lots", "--", "x"], "--mem='lots'"),
        (["slurm", "script", "--nodes", "0", "--", "x"], "--nodes=0"),
        (
            ["slurm", "script", "--nodes", "two", "--", "x"],
            "--nodes='two' must be a number of nodes N or a range",
        ),
        (
            ["slurm", "script", "--nodes", "3-2", "--", "x"],
            "--nodes=3-2: MIN=3 is above MAX=2. Hint: write 2-3",
        ),
        (["slurm", "script", "--nodes", "0-2", "--", "x"], "--nodes=0-2: MIN=0 must be at least 1 node."),
        (["slurm", "script", "--gpus-per-task", "1", "--", "x"], "CPU-only spec"),
        (["slurm", "script", "--export", "NOVALUE", "--", "x"], "must be NAME=VALUE"),
        (["slurm", "script"], "no command to run"),
        (["slurm", "script", "--config", "/no/such.toml", "--", "x"], "cannot be read"),
        (["slurm", "script", "--config", "bad.toml", "--", "x"], "is not valid TOML"),
        (["slurm", "script", "--config", "unknown.toml", "--", "x"], "unknown key(s) colour"),
        (["slurm", "status", "12x"], "is not a Slurm job id"),
    ],
)
def test_cli_bad_input_is_one_line_and_writes_nothing(
    argv: list[str],
    expected: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    for name, text in CONFIGS.items():
        (tmp_path / name).write_text(text)
    code, _, err = cli(capsys, *argv)
    assert code == 2 and expected in err and err.count("\n") == 1, err
    assert sorted(os.listdir(tmp_path)) == sorted(CONFIGS)


def test_submit_without_sbatch_says_how_to_get_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty PATH: no sbatch
    code, _, err = cli(capsys, "slurm", "submit", "--run-dir", str(tmp_path / "run"), "--", "python", "x.py")
    assert code == 2 and "`sbatch` is not on PATH" in err and "slurm-local.sh" in err


@pytest.mark.parametrize(
    ("nodes", "command", "expected"),
    [
        ("2-3", ("python", "train.py"), "#SBATCH --nodes=2-3"),
        ("3-3", ("python", "train.py"), "#SBATCH --nodes=3\n"),
        ("1-2", ("tfdist", "train", "--global-batch-size", "12"), "#SBATCH --nodes=1-2"),
    ],
)
def test_a_node_range_lets_slurm_start_with_fewer(
    nodes: str, command: tuple[str, ...], expected: str
) -> None:
    from tfdist.nodes import parse_node_range

    node_range = parse_node_range(nodes, "--nodes", "-")
    spec = SbatchSpec(command=command, nodes=node_range.high, min_nodes=node_range.low)
    assert expected in render_sbatch(spec)


def test_a_node_range_reserves_cpus_per_node_not_a_task_count() -> None:
    """sbatch --ntasks-per-node with a range makes Slurm allocate MIN nodes only: --mincpus instead."""
    text = render_sbatch(SbatchSpec(command=("python", "t.py"), nodes=3, min_nodes=2, ntasks_per_node=2))
    assert "#SBATCH --mincpus=2" in text and "#SBATCH --ntasks-per-node" not in text
    assert "srun --ntasks-per-node=2 " in text


def test_a_global_batch_must_divide_every_node_count_of_the_range() -> None:
    with pytest.raises(ConfigError, match=r"not divisible by the 2 replicas of 2 node\(s\) \(--nodes=2-3\)"):
        SbatchSpec(command=("tfdist", "train", "--global-batch-size", "9"), nodes=3, min_nodes=2)
