"""tfdist launch with many local workers: every line of every worker reaches its log and the console, and
the launcher's threads do not grow with the workers.

Why the bound holds: the launcher's own thread plus ONE thread reading every worker's pipe through a
selector (tfdist.launcher.logs.PipePump); a thread per pipe would be 33 threads at ``-n 32``. Open files do
grow with the workers, by what each one needs: the read end of its pipe and its log file.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from helpers.cli import TFDIST

WORKERS = 32
LINES = 5
#: The launcher's main thread, the pump's thread, and room for a helper thread of the launch itself
#: (a watchdog, a membership's) -- none of which may be per worker.
MAX_THREADS = 4
#: Per worker: its pipe and its log file; beyond them stdin/stdout/stderr, the selector and its wake-up
#: pipe, and the transient pipes of a process being started.
MAX_FILES = 2 * WORKERS + 16

SCRIPT = f"""import os, sys
rank = os.environ["TFDIST_RANK"]
for i in range({LINES}):
    print(f"rank {{rank}} line {{i}}", flush=True)
sys.stderr.write(f"rank {{rank}} done, no newline")
"""


def test_32_workers_every_line_logged_and_shown_with_a_bounded_launcher(tmp_path: Path) -> None:
    script = tmp_path / "print_lines.py"
    script.write_text(SCRIPT)
    logs = tmp_path / "run"
    console = tmp_path / "console.txt"
    cmd = [*TFDIST, "launch", "-n", str(WORKERS), "--cpu", "--run-dir", str(logs), str(script)]
    with console.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
        launcher = psutil.Process(proc.pid)
        threads = files = 0
        deadline = time.monotonic() + 120
        try:
            while proc.poll() is None and time.monotonic() < deadline:
                try:
                    threads = max(threads, launcher.num_threads())
                    files = max(files, launcher.num_fds())
                except psutil.NoSuchProcess:
                    break
                time.sleep(0.01)
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=30)
    shown = console.read_text()
    assert proc.returncode == 0, shown[-3000:]
    for rank in range(WORKERS):
        expected = [f"rank {rank} line {i}" for i in range(LINES)] + [f"rank {rank} done, no newline"]
        log = (logs / "attempt-0" / f"worker{rank}.log").read_text().splitlines()
        assert log == expected
        prefix = "chief" if f"[chief]: rank {rank} line 0" in shown else f"w{rank}"
        assert all(f"[{prefix}]: {line}\n" in shown for line in expected), (rank, shown[-2000:])
    assert 2 <= threads <= MAX_THREADS, threads
    assert files <= MAX_FILES, files


@pytest.mark.parametrize("lines", [1, 3])
def test_a_line_longer_than_a_pipe_arrives_whole(tmp_path: Path, lines: int) -> None:
    """A 200 KB line fills the pipe several times over before its newline: it is still one line."""
    script = tmp_path / "long_line.py"
    script.write_text(f"for i in range({lines}):\n    print(str(i) * 200_000, flush=True)\n")
    proc = subprocess.run(
        [*TFDIST, "launch", "-n", "2", "--cpu", "--run-dir", str(tmp_path / "run"), str(script)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    for rank in range(2):
        log = (tmp_path / "run" / "attempt-0" / f"worker{rank}.log").read_text().splitlines()
        assert log == [str(i) * 200_000 for i in range(lines)]
    assert proc.stdout.count("[w1]: " + "0" * 200_000 + "\n") == 1


GROUP = """import resource, sys
from tfdist.launcher.plan import ProcessSpec, TaskSlot
from tfdist.launcher.workers import WorkerGroup

soft, hard = {limits}
resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
env = {{"PATH": "/usr/bin:/bin"}}
alive = ("sh", "-c", "echo worker $0; sleep 1")  # every process still holds its pipe when the last starts
specs = [
    ProcessSpec(TaskSlot("worker", i, 0, i), (*alive, str(i)), env, f"{{sys.argv[1]}}/w{{i}}.log")
    for i in range({count})
]
group = WorkerGroup(specs, prefix=True, console_names=set())
group.start()
assert group.wait(deadline=None) is None
group.close(grace=5)
print("limit", resource.getrlimit(resource.RLIMIT_NOFILE)[0])
"""


def run_group(tmp_path: Path, count: int, soft: int, hard: int) -> subprocess.CompletedProcess[str]:
    code = GROUP.format(limits=(soft, hard), count=count)
    return subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=120
    )


def test_a_group_past_the_soft_file_limit_raises_it_and_runs(tmp_path: Path) -> None:
    """60 processes alive together hold about 120 files in the launcher; with a soft limit of 64 it raises
    its own."""
    proc = run_group(tmp_path, 60, 64, 4096)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert int(proc.stdout.split()[-1]) > 64
    assert all((tmp_path / f"w{i}.log").read_text() == f"worker {i}\n" for i in range(60))


def test_a_group_past_the_hard_file_limit_is_refused_before_it_starts(tmp_path: Path) -> None:
    proc = run_group(tmp_path, 60, 64, 64)
    assert proc.returncode != 0
    assert "60 processes need about 244 open files in the launcher, but it may hold at most 64" in proc.stderr
    assert not list(tmp_path.glob("w*.log"))  # nothing started
