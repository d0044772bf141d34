"""A worker's ConfigError is a user mistake: the launcher does not spend restarts on it (the same inputs
give the same error) and ends with the worker's one line, exit code 2 (real processes, no TensorFlow)."""

from __future__ import annotations

from pathlib import Path

from helpers.cli import tfdist

HELPER = str(Path(__file__).parent.parent / "helpers" / "user_error.py")
LINE = "ConfigError: global batch 9 is not divisible by the 2 replicas; use 8 or 10."


def test_a_config_error_in_a_worker_is_not_restarted_and_ends_with_its_line(tmp_path: Path) -> None:
    out, run = tmp_path / "out", tmp_path / "run"
    argv = ["-n", "2", "--cpu", "--max-restarts", "3", "--run-dir", str(run), HELPER, str(out)]
    proc = tfdist("launch", *argv, timeout=120)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert lines[-1] == f"tfdist launch: error: {LINE}", proc.stderr
    assert "tfdist launch: not restarted: the same error would come back." in proc.stderr
    assert "restarting" not in proc.stderr
    assert sorted(p.name for p in out.iterdir()) == ["attempt-0-0", "attempt-0-1", "scratch-1"]  # one attempt
    scratch = Path((out / "scratch-1").read_text())
    assert scratch.name.startswith("tfdist-worker1-") and not scratch.exists()  # removed before os._exit
    assert not (run / "attempt-1").exists()
    # The worker's own output is that one line too, not a traceback.
    log = (run / "attempt-0" / "worker1.log").read_text()
    assert LINE in log and "Traceback" not in log, log


def test_a_bug_of_the_program_is_not_restarted_and_a_fault_is_until_the_restarts_are_spent(
    tmp_path: Path,
) -> None:
    """A ValueError comes back on every restart: one attempt. An OSError may not: restarted, then the last
    line says the launcher gave up."""
    for kind, attempts, last in [
        ("value", 1, "tfdist launch: not restarted: the same error would come back."),
        ("oserror", 2, "tfdist launch: gave up after 2 attempts (--max-restarts 1)."),
    ]:
        out, run = tmp_path / kind / "out", tmp_path / kind / "run"
        argv = ["-n", "2", "--cpu", "--max-restarts", "1", "--run-dir", str(run), HELPER, str(out), kind]
        proc = tfdist("launch", *argv, timeout=120)
        assert proc.returncode == 1, proc.stderr
        assert proc.stderr.strip().splitlines()[-1] == last, proc.stderr
        assert len(list(out.glob("attempt-*-1"))) == attempts
        assert (proc.stdout + proc.stderr).count("Traceback") == attempts  # streamed once, not repeated
