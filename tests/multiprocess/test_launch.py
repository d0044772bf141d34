"""tfdist launch with real processes on localhost; every test bounded in time."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import psutil
import pytest

from helpers.cli import TFDIST, tfdist

HELPERS = Path(__file__).parent.parent / "helpers"
WORKER = str(HELPERS / "worker.py")


def launch_cmd(*args: str) -> list[str]:
    return [*TFDIST, "launch", *args]


def run(*args: str, timeout: float = 120, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return tfdist("launch", *args, timeout=timeout, cwd=cwd)


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def wait_for(predicate, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def read_pids(out: Path, n: int) -> list[int]:
    assert wait_for(lambda: all((out / f"pids-{r}.json").exists() for r in range(n)), 60), (
        "workers did not start"
    )
    return [pid for r in range(n) for pid in json.loads((out / f"pids-{r}.json").read_text())]


@pytest.mark.parametrize("n", [2, 4])
def test_every_worker_gets_its_rank_and_output_is_prefixed(n: int, tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = run("-n", str(n), "--cpu", "--run-dir", str(tmp_path / "run"), WORKER, "ranks", str(out))
    assert proc.returncode == 0, proc.stderr
    seen = [json.loads((out / f"rank-{r}.json").read_text()) for r in range(n)]
    assert [s["TFDIST_RANK"] for s in seen] == [str(r) for r in range(n)]
    assert {s["TFDIST_WORLD_SIZE"] for s in seen} == {str(n)}
    assert {s["TFDIST_RUN_DIR"] for s in seen} == {str(tmp_path / "run")}
    specs = [json.loads(s["TF_CONFIG"]) for s in seen]
    assert all(spec["cluster"] == specs[0]["cluster"] for spec in specs)
    assert [spec["task"]["index"] for spec in specs] == list(range(n))
    for r in range(n):
        assert f"[w{r}]: hello from rank {r}" in proc.stdout
        assert f"[w{r}]: to stderr from rank {r}" in proc.stdout
        log = (tmp_path / "run" / "attempt-0" / f"worker{r}.log").read_text()
        assert f"hello from rank {r}" in log and f"to stderr from rank {r}" in log


def test_no_prefix_and_quiet_workers(tmp_path: Path) -> None:
    proc = run(
        "-n",
        "2",
        "--cpu",
        "--no-prefix",
        "--quiet-workers",
        "--run-dir",
        str(tmp_path / "r"),
        WORKER,
        "ranks",
        str(tmp_path),
    )
    assert proc.returncode == 0, proc.stderr
    assert "hello from rank 0" in proc.stdout and "[w0]" not in proc.stdout
    assert "hello from rank 1" not in proc.stdout
    assert "hello from rank 1" in (tmp_path / "r" / "attempt-0" / "worker1.log").read_text()


def test_plain_tf_distribute_script_trains_with_identical_weights(tmp_path: Path) -> None:
    proc = run(
        "-n",
        "2",
        "--cpu",
        "--run-dir",
        str(tmp_path / "run"),
        str(HELPERS / "plain_mwms.py"),
        str(tmp_path),
        timeout=240,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "on 2 replicas" in proc.stdout
    w0, w1 = np.load(tmp_path / "weights-0.npy"), np.load(tmp_path / "weights-1.npy")
    assert np.array_equal(w0, w1)
    assert not np.allclose(w0, 0.0)


def test_kill_9_of_one_worker_stops_the_group(tmp_path: Path) -> None:
    out = tmp_path / "out"
    launcher = subprocess.Popen(
        launch_cmd(
            "-n", "2", "--cpu", "--grace", "3", "--run-dir", str(tmp_path / "run"), WORKER, "sleep", str(out)
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        pids = read_pids(out, 2)
        w1 = json.loads((out / "pids-1.json").read_text())[0]
        killed_at = time.monotonic()
        os.kill(w1, signal.SIGKILL)
        _, stderr = launcher.communicate(timeout=30)
        assert time.monotonic() - killed_at < 10
    finally:
        launcher.kill()
    assert launcher.returncode == 128 + 9
    assert "w1 failed first: killed by SIGKILL" in stderr
    assert str(tmp_path / "run" / "attempt-0" / "worker1.log") in stderr
    assert "hello from rank 1" in stderr  # the last log lines are shown
    assert wait_for(lambda: not any(alive(p) for p in pids), 5), [p for p in pids if alive(p)]


def test_sigterm_to_launcher_ends_everything_within_grace(tmp_path: Path) -> None:
    out = tmp_path / "out"
    grace = 2.0
    launcher = subprocess.Popen(
        launch_cmd(
            "-n",
            "2",
            "--cpu",
            "--grace",
            str(grace),
            "--run-dir",
            str(tmp_path / "run"),
            WORKER,
            "stubborn",
            str(out),
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        pids = read_pids(out, 2)
        sent = time.monotonic()
        launcher.send_signal(signal.SIGTERM)
        _, stderr = launcher.communicate(timeout=grace + 10)
        assert wait_for(
            lambda: not any(alive(p) for p in pids), max(0.1, grace + 5 - (time.monotonic() - sent))
        )
    finally:
        launcher.kill()
    assert launcher.returncode == 128 + signal.SIGTERM
    assert "stopped by SIGTERM" in stderr


def test_launcher_killed_with_sigkill_leaves_no_workers(tmp_path: Path) -> None:
    out = tmp_path / "out"
    launcher = subprocess.Popen(
        launch_cmd("-n", "2", "--cpu", "--run-dir", str(tmp_path / "run"), WORKER, "sleep", str(out)),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        pids = read_pids(out, 2)
        launcher.kill()
        launcher.wait(timeout=10)
        workers = [json.loads((out / f"pids-{r}.json").read_text())[0] for r in range(2)]
        assert wait_for(lambda: not any(alive(p) for p in workers), 5)
    finally:
        launcher.kill()
        for pid in pids:  # the workers' own children are not the launcher's: clean them up here
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_first_failure_code_is_the_exit_code(tmp_path: Path) -> None:
    proc = run(
        "-n",
        "2",
        "--cpu",
        "--grace",
        "2",
        "--run-dir",
        str(tmp_path / "run"),
        WORKER,
        "exit",
        str(tmp_path),
        "7",
        timeout=60,
    )
    assert proc.returncode == 7
    assert "w1 failed first: exited with code 7" in proc.stderr
    assert "rank 1 is about to fail" in proc.stderr


def test_python_api_raises_worker_failed_error_with_check(tmp_path: Path) -> None:
    """launch(..., check=True): like subprocess.run(check=True), a failed job raises (after its report)."""
    from dataclasses import replace

    from tfdist import WorkerFailedError
    from tfdist.launcher import LaunchConfig, launch

    config = LaunchConfig(nproc_per_node=2, cpu=True, grace=2, run_dir=str(tmp_path / "run"))
    with pytest.raises(WorkerFailedError) as info:
        launch(config, [WORKER, "exit", str(tmp_path), "7"], check=True)
    assert (info.value.name, info.value.code) == ("w1", 7)
    assert info.value.log_path and Path(info.value.log_path).exists()
    again = replace(config, run_dir=str(tmp_path / "again"))
    assert launch(again, [WORKER, "exit", str(tmp_path), "7"]).exit_code == 7  # without check: a result


def test_restart_after_one_failure_succeeds_on_attempt_1(tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = run(
        "-n",
        "2",
        "--cpu",
        "--max-restarts",
        "1",
        "--grace",
        "2",
        "--run-dir",
        str(tmp_path / "run"),
        WORKER,
        "fail-once",
        str(out),
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert "restarting all workers (restart 1/1)" in proc.stderr
    files = {p.name for p in out.iterdir()}
    assert {"done-0-attempt1.json", "done-1-attempt1.json"} <= files and "done-1-attempt0.json" not in files
    assert (tmp_path / "run" / "attempt-0" / "worker1.log").exists() and (
        tmp_path / "run" / "attempt-1" / "worker1.log"
    ).exists()


def test_watchdog_fires_on_a_silent_worker(tmp_path: Path) -> None:
    watchdog = 3.0
    started = time.monotonic()
    proc = run(
        "-n",
        "2",
        "--cpu",
        "--watchdog-timeout",
        str(watchdog),
        "--grace",
        "1",
        "--run-dir",
        str(tmp_path / "run"),
        WORKER,
        "silent",
        str(tmp_path),
        timeout=60,
    )
    elapsed = time.monotonic() - started
    assert proc.returncode == 124
    assert "hung: no output, heartbeat or step" in proc.stderr
    assert elapsed < watchdog + 5 + 3  # + start-up of the interpreters


def test_watchdog_ends_a_hung_job_within_the_timeout_plus_5_s_whatever_the_grace(tmp_path: Path) -> None:
    """Workers that ignore SIGTERM, --grace 30: the watchdog still ends the job within its timeout + 5 s."""
    watchdog, startup = 3.0, 4.0
    started = time.monotonic()
    proc = run(
        "-n",
        "2",
        "--cpu",
        "--watchdog-timeout",
        str(watchdog),
        "--grace",
        "30",
        "--run-dir",
        str(tmp_path / "run"),
        WORKER,
        "stubborn",
        str(tmp_path),
        timeout=60,
    )
    assert proc.returncode == 124, proc.stderr
    assert "hung: no output, heartbeat or step" in proc.stderr
    assert time.monotonic() - started < watchdog + 5 + startup


def test_heartbeat_file_keeps_a_silent_worker_alive(tmp_path: Path) -> None:
    script = tmp_path / "beat.py"
    script.write_text(
        "import os, pathlib, time\n"
        "p = pathlib.Path(os.environ['TFDIST_HEARTBEAT_FILE'])\n"
        "for _ in range(12):\n    p.touch(); time.sleep(0.25)\n"
    )
    proc = run(
        "-n",
        "2",
        "--cpu",
        "--watchdog-timeout",
        "1.5",
        "--run-dir",
        str(tmp_path / "run"),
        str(script),
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr


def test_run_timeout(tmp_path: Path) -> None:
    proc = run(
        "-n",
        "1",
        "--cpu",
        "--timeout",
        "2",
        "--grace",
        "1",
        "--run-dir",
        str(tmp_path / "run"),
        WORKER,
        "silent",
        str(tmp_path),
        timeout=60,
    )
    assert proc.returncode == 124 and "--timeout 2 s reached" in proc.stderr


def test_parameter_server_job_completes(tmp_path: Path) -> None:
    proc = run(
        "-n",
        "2",
        "--ps",
        "1",
        "--cpu",
        "--run-dir",
        str(tmp_path / "run"),
        str(HELPERS / "ps_chief.py"),
        str(tmp_path),
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads((tmp_path / "ps-result.json").read_text())
    assert result["kind"].startswith("ParameterServerStrategy") and result["workers"] == 2
    assert result["steps"] == 20.0
    assert result["weight"] < 5.0
    for name in ("chief0", "worker0", "worker1", "ps0"):
        assert (tmp_path / "run" / "attempt-0" / f"{name}.log").exists()


# Each worker writes its CPU set to a file of its own (console lines of MPI ranks may interleave).
AFFINITY = (
    "import json, os, pathlib, sys\n"
    "out = pathlib.Path(sys.argv[1]) / f'cpus-{os.getpid()}.json'\n"
    "out.write_text(json.dumps(sorted(os.sched_getaffinity(0))))\n"
)


def reported_cpus(where: Path) -> list[list[int]]:
    return sorted(json.loads(p.read_text()) for p in where.glob("cpus-*.json"))


@pytest.mark.parametrize("backend", ["tf", "mpi"])
def test_cpu_workers_are_bound_to_their_own_cores(backend: str, tmp_path: Path) -> None:
    script = tmp_path / "cpus.py"
    script.write_text(AFFINITY)
    cpus = sorted(os.sched_getaffinity(0))
    n = min(2, len(cpus))
    b, f = tmp_path / "b", tmp_path / "f"
    b.mkdir(), f.mkdir()
    bound = run("--backend", backend, "-n", str(n), "--cpu", "--run-dir", str(b / "run"), str(script), str(b))
    assert bound.returncode == 0, bound.stdout[-2000:] + bound.stderr[-2000:]
    share = len(cpus) // n
    assert reported_cpus(b) == [cpus[i * share : (i + 1) * share] for i in range(n)]
    argv = ["--backend", backend, "-n", str(n), "--cpu", "--bind-to", "none", "--run-dir", str(f / "run")]
    free = run(*argv, str(script), str(f))
    assert free.returncode == 0
    assert reported_cpus(f) == [cpus] * n


def test_an_mpi_rank_stays_on_the_cores_its_launcher_was_given(tmp_path: Path) -> None:
    # Hydra's own core numbering once put the rank of a launcher kept to the last core on core 0.
    script = tmp_path / "cpus.py"
    script.write_text(AFFINITY)
    last = max(os.sched_getaffinity(0))
    argv = [*launch_cmd("--backend", "mpi", "-n", "1", "--cpu", "--run-dir", str(tmp_path / "run"))]
    pin = lambda: os.sched_setaffinity(0, {last})  # noqa: E731
    proc = subprocess.run(
        [*argv, str(script), str(tmp_path)], preexec_fn=pin, capture_output=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert reported_cpus(tmp_path) == [[last]]


def test_core_binding_with_more_workers_than_cores_is_one_line(tmp_path: Path) -> None:
    script = tmp_path / "cpus.py"
    script.write_text(AFFINITY)
    n = len(os.sched_getaffinity(0)) + 1
    argv = ["-n", str(n), "--cpu", "--bind-to", "core", "--run-dir", str(tmp_path / "run")]
    proc = run(*argv, str(script), str(tmp_path))
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "--bind-to core" in proc.stderr
    assert not (tmp_path / "run").exists()
