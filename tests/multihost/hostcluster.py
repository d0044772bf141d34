"""The multi-node Slurm on test hosts as the tests drive it, and the one-process runs they compare with.

Every name, address and directory here is the tests' own (prefix ``tfdt``, subnet 10.78.0.0/24), so hosts or
a cluster made by hand are never touched; whatever a crashed run left behind is removed when the next one
starts.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import pytest

ROOT = Path(__file__).parent.parent.parent
HOSTS_SCRIPT = str(ROOT / "scripts" / "testhosts.sh")
SLURM_SCRIPT = str(ROOT / "scripts" / "slurm-local.sh")
NODES = 3
CLUSTER_ENV = {
    "TFDIST_HOSTS_PREFIX": "tfdt",
    "TFDIST_HOSTS_SUBNET": "10.78.0",
    "TFDIST_SLURM_DIR": "/tmp/tfdist-slurm-multihost",
    "TFDIST_SLURM_PORT": "16957",
    # A lost node is declared DOWN after this many seconds (Slurm's default is 300).
    "TFDIST_SLURMD_TIMEOUT": "20",
}
#: Variables of the shell running the tests that must not reach the cluster's clients and jobs.
LEAKY = ("TF_CONFIG", "SLURM_", "TFDIST_", "CUDA_VISIBLE_DEVICES", "OMPI_", "PMI_", "PMIX_")
FINAL = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED")


@dataclass(frozen=True)
class Cluster:
    """The multi-node Slurm on test hosts: run commands on a host, submit and watch jobs."""

    conf: str
    env: dict[str, str]

    def on(self, host: str, *argv: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` on ``host`` (its network, hostname and hosts file) and capture its output."""
        return subprocess.run(
            [HOSTS_SCRIPT, "exec", host, "--", *argv],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def tfdist(
        self, *args: str, host: str = "node1", timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        """``tfdist ARGS`` on a host (the login node of this cluster is node1)."""
        return self.on(host, sys.executable, "-m", "tfdist", *args, timeout=timeout)

    def submit(self, run_dir: Path, *command: str, options: tuple[str, ...] = ()) -> str:
        """``tfdist slurm submit`` and the job id (fails the test with sbatch's answer otherwise)."""
        proc = self.tfdist("slurm", "submit", "--run-dir", str(run_dir), *options, "--", *command)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout.split()[2].rstrip(";")

    def job(self, job_id: str) -> dict[str, str]:
        """``scontrol show job`` as a dict."""
        proc = self.on("node1", "scontrol", "show", "job", "-o", job_id, timeout=30)
        assert proc.returncode == 0, proc.stderr
        return dict(tok.partition("=")[::2] for tok in proc.stdout.split() if "=" in tok)

    def wait(self, job_id: str, states: tuple[str, ...], timeout: float, restarts: int = 0) -> dict[str, str]:
        """The job once it is in one of ``states`` (with at least ``restarts`` requeues)."""
        deadline = time.monotonic() + timeout
        job = self.job(job_id)
        while time.monotonic() < deadline:
            job = self.job(job_id)
            if job["JobState"] in states and int(job.get("Restarts", "0")) >= restarts:
                return job
            time.sleep(0.5)
        raise AssertionError(f"job {job_id} still {job['JobState']} after {timeout} s: {job}")

    def received_bytes(self, host: str) -> int:
        """Bytes ``host``'s link to the test switch has received so far."""
        return received_bytes(CLUSTER_ENV["TFDIST_HOSTS_PREFIX"], host)

    def slurm_script(self, *args: str) -> subprocess.CompletedProcess[str]:
        """``scripts/slurm-local.sh ARGS`` for this cluster (e.g. node-stop node2)."""
        return subprocess.run(
            [SLURM_SCRIPT, *args], env=self.env, capture_output=True, text=True, timeout=120
        )

    def hosts_script(self, *args: str) -> subprocess.CompletedProcess[str]:
        """``scripts/testhosts.sh ARGS`` for this cluster's hosts (e.g. cut node2)."""
        return subprocess.run([HOSTS_SCRIPT, *args], env=self.env, capture_output=True, text=True, timeout=60)


def one_process(*argv: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """The same script in one plain process on this machine: no cluster variables at all."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(LEAKY)}
    env["TFDIST_RANK"] = "0"  # the helpers name their outputs by rank
    proc = subprocess.run([sys.executable, *argv], env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def received_bytes(prefix: str, host: str) -> int:
    """Bytes the test host ``host`` (of the hosts named ``prefix``) has received on its link so far."""
    proc = subprocess.run(
        ["ip", "-n", f"{prefix}-{host}", "-s", "-j", "link", "show", "eth0"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 0, proc.stderr
    return int(json.loads(proc.stdout)[0]["stats64"]["rx"]["bytes"])


def unavailable_reason() -> str | None:
    """Why test hosts cannot be made here (not root, no namespaces), or None."""
    if sys.platform != "linux":
        return "test hosts are Linux network namespaces"
    proc = subprocess.run(
        [HOSTS_SCRIPT, "check"], env={**os.environ, **CLUSTER_ENV}, capture_output=True, text=True, timeout=30
    )
    return None if proc.returncode == 0 else (proc.stdout + proc.stderr).strip() or "cannot make test hosts"


def made_hosts(env: dict[str, str], count: int, *then: tuple[str, ...]) -> Iterator[None]:
    """Test hosts node1..node<count> under ``env``'s prefix for a module's tests (skipped where they cannot be
    made), with ``then``'s ``testhosts.sh`` commands run after (e.g. ``("cap", "node3", "200mbit")``);
    removed afterwards. A module's fixture: ``yield from made_hosts(ENV, 3)``."""
    reason = unavailable_reason()
    if reason:
        pytest.skip(f"no test hosts: {reason}")
    try:
        for args in (("up", str(count)), *then):
            made = subprocess.run([HOSTS_SCRIPT, *args], env=env, capture_output=True, text=True, timeout=60)
            assert made.returncode == 0, made.stderr
        yield
    finally:
        subprocess.run([HOSTS_SCRIPT, "down"], env=env, capture_output=True, timeout=60)


#: The output file of each launcher started by :func:`launch_on`, until :func:`finish` reads it.
_OUTPUTS: dict[int, IO[str]] = {}


def launch_on(host: str, env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    """`tfdist launch ARGS` started on a test host; its output goes to a file (a pipe nobody reads while
    another node's launcher is awaited would fill and stall the job)."""
    output = tempfile.TemporaryFile("w+")  # noqa: SIM115 (closed by finish())
    proc = subprocess.Popen(
        [HOSTS_SCRIPT, "exec", host, "--", sys.executable, "-m", "tfdist", "launch", *args],
        env=env,
        stdout=output,
        stderr=subprocess.STDOUT,
        text=True,
    )
    _OUTPUTS[proc.pid] = output
    return proc


def finish(procs: list[subprocess.Popen[str]], timeout: float = 300) -> list[tuple[int, str]]:
    """Each launcher's exit code and output (killed after ``timeout`` seconds)."""
    deadline = time.monotonic() + timeout
    results = []
    for proc in procs:
        try:
            proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)
        output = _OUTPUTS.pop(proc.pid)
        output.seek(0)
        results.append((proc.returncode, output.read()))
        output.close()
    return results
