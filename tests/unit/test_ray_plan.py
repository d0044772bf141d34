"""Ray placement without a cluster: bundles, what cannot be placed, each worker's environment, the flags,
the environment class, and the node-side process host run for real (no Ray needed for it)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tfdist.cli import main as cli_main
from tfdist.env import RayEnvironment, detect_environment
from tfdist.errors import ConfigError
from tfdist.launcher.config import LaunchConfig
from tfdist.launcher.ray.address import check_address
from tfdist.launcher.ray.host import WorkerHost, node_env
from tfdist.launcher.ray.plan import (
    NodeResources,
    Placement,
    bundle,
    plan_ray_workers,
    shortfall,
)
from tfdist.worker import boot_dir

TWO_NODES = [NodeResources("10.0.0.1", 2, 0), NodeResources("10.0.0.2", 2, 0)]


def ray_config(n: int = 2, **kw: object) -> LaunchConfig:
    options: dict[str, object] = {"ray": "10.0.0.1:6379", **kw}
    return LaunchConfig(command=("train.py",), nproc_per_node=n, **options)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("n", "kw", "nodes", "expected"),
    [
        (2, {}, TWO_NODES, None),
        (4, {}, TWO_NODES, None),
        (
            5,
            {},
            TWO_NODES,
            "-n 5 workers need 5 CPU (1 per worker) but the Ray cluster at 10.0.0.1:6379 has 4 CPU",
        ),
        (
            2,
            {"ray_gpus": 1.0},
            TWO_NODES,
            "need 2 GPU (1 per worker) but the Ray cluster at 10.0.0.1:6379 has 0 GPU",
        ),
        (3, {"ray_strategy": "strict-spread"}, TWO_NODES, "only 2 node(s)"),
        (2, {"ray_strategy": "strict-spread"}, TWO_NODES, None),
        (2, {"ray_cpus": 3.0}, [NodeResources("a", 4, 0), NodeResources("b", 2, 0)], "at most 1 fit"),
        (1, {"ray_gpus": 2.0}, [NodeResources("a", 8, 1), NodeResources("b", 8, 1)], "at most 0 fit"),
    ],
)
def test_shortfall_names_what_is_missing(
    n: int, kw: dict[str, object], nodes: list[NodeResources], expected: str | None
) -> None:
    why = shortfall(ray_config(n, **kw), nodes, "10.0.0.1:6379")
    if expected is None:
        assert why is None
    else:
        assert why is not None and expected in why and "\n" not in why and "Hint:" in why


def test_bundle_has_gpus_only_when_asked() -> None:
    assert bundle(ray_config()) == {"CPU": 1.0}
    assert bundle(ray_config(ray_gpus=1.0, ray_cpus=4.0)) == {"CPU": 4.0, "GPU": 1.0}


def test_each_worker_gets_its_node_address_port_rank_and_local_rank(tmp_path: Path) -> None:
    places = [
        Placement("10.0.0.1", 4000, "n1"),
        Placement("10.0.0.2", 4001, "n2"),
        Placement("10.0.0.1", 4002, "n1"),
    ]
    specs = plan_ray_workers(
        ray_config(3, cpu=True, ray_cpus=2.0), places, run_dir=str(tmp_path), attempt=1, base_env={}
    )
    assert [s.name for s in specs] == ["w0", "w1", "w2"]
    cluster = ["10.0.0.1:4000", "10.0.0.2:4001", "10.0.0.1:4002"]
    for index, spec in enumerate(specs):
        tf_config = json.loads(spec.env["TF_CONFIG"])
        assert tf_config == {"cluster": {"worker": cluster}, "task": {"type": "worker", "index": index}}
        assert spec.env["TFDIST_RANK"] == str(index) and spec.env["TFDIST_WORLD_SIZE"] == "3"
        assert spec.env["TFDIST_RESTART_COUNT"] == "1"
        assert spec.env["TF_NUM_INTRAOP_THREADS"] == "2"  # the bundle's CPUs
        assert spec.env["CUDA_VISIBLE_DEVICES"] == ""  # --cpu
        assert spec.log_path == str(tmp_path / "attempt-1" / f"worker{index}.log")
        assert spec.env["TFDIST_HEARTBEAT_FILE"].endswith(f"worker{index}.heartbeat")
        assert spec.cpus == ()  # no binding: the node's cores are Ray's to share out
    assert [s.env["TFDIST_LOCAL_RANK"] for s in specs] == ["0", "0", "1"]
    assert [s.env["TFDIST_LOCAL_WORLD_SIZE"] for s in specs] == ["2", "1", "2"]


def test_gpu_workers_keep_the_gpus_ray_gives_their_bundle(tmp_path: Path) -> None:
    places = [Placement("10.0.0.1", 4000, "n1")]
    spec = plan_ray_workers(
        ray_config(1, ray_gpus=1.0), places, run_dir=str(tmp_path), attempt=0, base_env={}
    )[0]
    assert "CUDA_VISIBLE_DEVICES" not in spec.env and "TFDIST_GPUS_PER_WORKER" not in spec.env
    spec = plan_ray_workers(
        ray_config(1, ray_gpus=2.0), places, run_dir=str(tmp_path), attempt=0, base_env={}
    )[0]
    assert spec.env["TFDIST_GPUS_PER_WORKER"] == "all"


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"nnodes": 2, "hosts": ("a", "b")}, "--nnodes, --hosts cannot be combined"),
        ({"backend": "mpi"}, "--backend mpi cannot be combined"),
        ({"ps": 1}, "--ps cannot"),
        ({"ray_strategy": "random"}, "--ray-strategy='random' is not one of pack, spread, strict-spread"),
        ({"ray_gpus": -1.0}, "--ray-gpus=-1: give 0 or more GPUs per worker"),
        ({"ray": "train.py"}, "--ray-address='train.py' must be HOST:PORT"),
        ({"ray": "head:99999"}, "must be HOST:PORT"),
    ],
)
def test_config_refuses_what_ray_cannot_place(kw: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError) as err:
        ray_config(**kw)
    assert message in str(err.value)


@pytest.mark.parametrize(
    "address", ["auto", "10.1.2.3:6379", "ray://head:10001", "[::1]:6379", "head.local:6379"]
)
def test_addresses(address: str) -> None:
    assert check_address(address) == address


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (
            ["--ray", "-n", "2"],
            {"ray": "auto", "ray_gpus": 0.0, "ray_strategy": "spread", "nproc_per_node": 2},
        ),
        (
            ["--ray", "--ray-strategy", "strict-spread"],
            {"ray_strategy": "strict-spread", "nproc_per_node": 1},
        ),
        (["--ray-address", "h:1", "--cpu", "--ray-gpus", "2"], {"ray_gpus": 0.0}),
        ([], {"ray": None, "gpus_per_worker": "1"}),
        (["--ray-address", "h:6379", "--ray-gpus", "2"], {"ray": "h:6379", "ray_gpus": 2.0}),
        (
            ["--ray", "--ray-gpus", "0.5", "-n", "2"],
            {"ray": "auto", "ray_gpus": 0.5, "command": ("train.py",)},
        ),
    ],
)
def test_flags(argv: list[str], expected: dict[str, object]) -> None:
    import argparse

    from tfdist.cli import launch as launch_cli

    parser = argparse.ArgumentParser()
    launch_cli.register(parser.add_subparsers())
    config = launch_cli.config_from_args(parser.parse_args(["launch", *argv, "train.py"]))
    for key, value in expected.items():
        assert getattr(config, key) == value


def test_gpus_per_worker_must_be_a_number_with_ray(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    script = tmp_path / "t.py"
    script.write_text("print(1)\n")
    assert cli_main(["launch", "--ray-address", "h:6379", "--gpus-per-worker", "all", str(script)]) == 2
    err = capsys.readouterr().err.strip()
    assert (
        len(err.splitlines()) == 1
        and "--gpus-per-worker='all' with --ray: a worker's GPUs on Ray are --ray-gpus" in err
    )


def test_without_ray_installed_one_line_with_the_install_hint(tmp_path: Path) -> None:
    script = tmp_path / "t.py"
    script.write_text("print(1)\n")
    code = (
        "import sys; sys.modules['ray'] = None\n"  # what an environment without Ray looks like to import
        "from tfdist.cli import main\n"
        f"sys.exit(main(['launch', '--ray', '-n', '2', {str(script)!r}]))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "--ray needs Ray, which is not installed here" in lines[0]
    assert "pip install 'tfdist[ray]'" in lines[0] and not list(tmp_path.glob("tfdist-runs"))


def test_ray_environment_detected_from_a_process_ray_started() -> None:
    env = detect_environment({"RAY_RAYLET_PID": "12", "RAY_JOB_ID": "02000000", "CUDA_VISIBLE_DEVICES": "1"})
    assert isinstance(env, RayEnvironment) and env.kind == "ray"
    assert (
        env.world_size == 1
        and env.gpu_ids == ("1",)
        and env.describe()["ray"]
        == {
            "address": None,
            "job_id": "02000000",
        }
    )
    # TF_CONFIG (Ray Train's workers, tfdist launch --ray) still decides; a Ray node's leaked Slurm does not
    tf = detect_environment(
        {
            "RAY_RAYLET_PID": "12",
            "TF_CONFIG": json.dumps(
                {"cluster": {"worker": ["a:1", "b:2"]}, "task": {"type": "worker", "index": 1}}
            ),
        }
    )
    assert tf.kind == "tf_config" and tf.rank == 1
    slurm = {"SLURM_PROCID": "3", "SLURM_NTASKS": "4", "SLURM_STEP_ID": "0", "SLURM_JOB_ID": "9"}
    assert detect_environment({"RAY_RAYLET_PID": "12", **slurm}).kind == "ray"
    assert detect_environment({"RAY_ADDRESS": "h:6379"}).kind == "local"  # a shell pointing at a cluster


def test_node_env_puts_this_nodes_bootstrap_first_and_keeps_the_nodes_path() -> None:
    planned = {"PYTHONPATH": os.pathsep.join(["/launcher/boot", "/shared/lib"]), "TF_CONFIG": "{}"}
    env = node_env(planned, {"PYTHONPATH": "/node/lib", "PATH": "/usr/bin"}, "/launcher/boot")
    assert env["PYTHONPATH"].split(os.pathsep) == [boot_dir(), "/shared/lib", "/node/lib"]
    assert env["PATH"] == "/usr/bin" and env["TF_CONFIG"] == "{}" and env["TFDIST_BOOTSTRAP"] == "1"


def read_all(host: WorkerHost, timeout: float = 30) -> dict[str, object]:
    lines: list[str] = []
    records: dict[str, str] = {}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        reply = host.read(0.5)
        lines += reply["lines"]
        records.update(reply["records"])
        if reply["eof"]:
            return {**reply, "lines": lines, "records": records}
    raise AssertionError(f"no end of output after {timeout} s: {lines}")


def test_worker_host_runs_reads_and_ships_records(tmp_path: Path) -> None:
    attempt = tmp_path / "attempt-0"
    script = (
        "import os, pathlib\n"
        "d = pathlib.Path(os.environ['TFDIST_ATTEMPT_DIR'])\n"
        "(d / 'rank1.strategy.json').write_text('{\"spans\": true}')\n"
        "pathlib.Path(os.environ['TFDIST_HEARTBEAT_FILE']).touch()\n"
        "print('hello from', os.environ['TFDIST_RANK'])\n"
        "raise SystemExit(3)\n"
    )
    planned = {
        "TFDIST_ATTEMPT_DIR": str(attempt),
        "TFDIST_RANK": "1",
        "TFDIST_HEARTBEAT_FILE": str(attempt / "worker1.heartbeat"),
    }
    host = WorkerHost()
    host.start(["/launcher/python", "-c", script], planned, str(tmp_path), "/launcher/python", boot_dir())
    reply = read_all(host)
    assert reply["lines"] == ["hello from 1"] and reply["code"] == 3
    records = reply["records"]
    assert set(records) == {"rank1.strategy.json", "rank1.progress.json"}
    assert records["rank1.strategy.json"] == '{"spans": true}'
    progress = json.loads(records["rank1.progress.json"])  # the worker's steps, for the hang check
    assert (progress["steps"], progress["done"]) == (0, True)
    assert isinstance(reply["heartbeat_age"], float) and reply["heartbeat_age"] < 30
    assert host.read(0.1)["records"] == {}  # each record once, until it changes


def test_worker_host_signals_and_kills_the_whole_process_group(tmp_path: Path) -> None:
    host = WorkerHost()
    script = (
        "import signal, time\n"
        "signal.signal(signal.SIGTERM, lambda *a: print('term', flush=True))\n"
        "print('up', flush=True)\n"
        "time.sleep(60)\n"
    )
    host.start([sys.executable, "-c", script], {}, str(tmp_path), "/x", boot_dir())
    deadline = time.monotonic() + 20
    seen: list[str] = []
    while "up" not in seen and time.monotonic() < deadline:
        seen += host.read(0.5)["lines"]
    host.signal(signal.SIGTERM)
    while "term" not in seen and time.monotonic() < deadline:
        seen += host.read(0.5)["lines"]
    assert seen == ["up", "term"]
    assert host.kill() == -signal.SIGKILL
    assert read_all(host)["code"] == -signal.SIGKILL


def test_a_bare_ray_flag_never_takes_the_script_for_an_address(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``--ray train.py``: the script stays the script."""
    import argparse

    from tfdist.cli import launch as launch_cli

    parser = argparse.ArgumentParser()
    launch_cli.register(parser.add_subparsers())
    config = launch_cli.config_from_args(parser.parse_args(["launch", "--ray", "train.py", "--ray", "h:1"]))
    assert (config.ray, config.command) == ("auto", ("train.py", "--ray", "h:1"))  # the script's own args
    assert capsys.readouterr().err == ""


def test_ray_gpus_without_ray_is_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    script = tmp_path / "t.py"
    script.write_text("print(1)\n")
    assert cli_main(["launch", "--ray-gpus", "1", str(script)]) == 2
    assert (
        capsys.readouterr().err
        == "tfdist launch: error: --ray-gpus=1 without --ray. Hint: add --ray (or --ray-address).\n"
    )
