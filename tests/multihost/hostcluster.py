"""The test hosts and the multi-node Slurm on them as the tests drive them, and the one-process runs they
compare with.

Every name, address and directory here is the tests' own: the hosts' prefix ``tfdt`` and subnet 10.78.0
(network namespaces tfdt-node1..3 and tfdt-sw), no other test's and no benchmark's (benchmarks/ use tfdb and
tfdx), so hosts or a cluster made by hand or by a benchmark are never touched; whatever a crashed run left
behind is removed when the next one starts.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import psutil
import pytest

from helpers.cli import TFDIST

ROOT = Path(__file__).parent.parent.parent
HOSTS_SCRIPT = str(ROOT / "scripts" / "testhosts.sh")
SLURM_SCRIPT = str(ROOT / "scripts" / "slurm-local.sh")
NODES = 3
#: The tests' hosts: node1..node3 at SUBNET.1..3, in the network namespaces PREFIX-node1.. (one test run's).
PREFIX, SUBNET = "tfdt", "10.78.0"
HOSTS_ENV = {"TFDIST_HOSTS_PREFIX": PREFIX, "TFDIST_HOSTS_SUBNET": SUBNET}
CLUSTER_ENV = {
    **HOSTS_ENV,
    "TFDIST_SLURM_DIR": "/tmp/tfdist-slurm-multihost",
    "TFDIST_SLURM_PORT": "16957",
    # A lost node is declared DOWN after this many seconds (Slurm's default is 300).
    "TFDIST_SLURMD_TIMEOUT": "20",
}
#: Variables of the shell running the tests that must not reach the cluster's clients and jobs.
LEAKY = ("TF_CONFIG", "SLURM_", "TFDIST_", "CUDA_VISIBLE_DEVICES", "OMPI_", "PMI_", "PMIX_")
FINAL = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED")


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without what would leak into a host's processes, with the hosts' names
    (testhosts.sh reads them) and ``extra``."""
    return {**{k: v for k, v in os.environ.items() if not k.startswith(LEAKY)}, **HOSTS_ENV, **extra}


@dataclass(frozen=True)
class Hosts:
    """The test hosts node1..node3 on one switch (scripts/testhosts.sh), made once per test run."""

    env: dict[str, str]

    def address(self, host: str) -> str:
        """``host``'s address on the switch (node2: SUBNET.2)."""
        return f"{SUBNET}.{int(host.removeprefix('node'))}"

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
        """``tfdist ARGS`` on a host (node1 unless named; a cluster's login node)."""
        return self.on(host, *TFDIST, *args, timeout=timeout)

    def launch_on(self, host: str, *args: str, env: Mapping[str, str] | None = None) -> subprocess.Popen[str]:
        """``tfdist launch ARGS`` started on ``host`` with these hosts' environment and ``env``'s variables;
        :func:`finish` waits for it."""
        return launch_on(host, {**self.env, **(env or {})}, *args)

    def hosts_script(
        self, *args: str, check: bool = False, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        """``scripts/testhosts.sh ARGS`` for these hosts (e.g. cut node2); ``check``: it must succeed."""
        proc = subprocess.run(
            [HOSTS_SCRIPT, *args], env=self.env, capture_output=True, text=True, timeout=timeout
        )
        assert not check or proc.returncode == 0, proc.stderr
        return proc

    def kill(self, host: str) -> subprocess.CompletedProcess[str]:
        """Every process of ``host`` killed (a host that loses power). The Slurm cluster's daemon there, where
        the cluster runs on these hosts, is started again after the test (:func:`repair_killed`)."""
        killed = self.hosts_script("kill", host)
        assert killed.returncode == 0, killed.stderr
        _KILLED.add(host)
        return killed

    def processes(self, host: str) -> list[int]:
        """PIDs running on ``host`` (in its network namespace), the Slurm cluster's daemons left out: what a
        test's job left there."""
        proc = subprocess.run(
            ["ip", "netns", "pids", f"{PREFIX}-{host}"], capture_output=True, text=True, timeout=30
        )
        return [pid for pid in map(int, proc.stdout.split()) if pid not in slurm_daemons()]

    def received_bytes(self, host: str) -> int:
        """Bytes ``host``'s link to the test switch has received so far."""
        return received_bytes(PREFIX, host)


def slurm_runs() -> bool:
    """Whether the Slurm cluster of :data:`CLUSTER_ENV` runs (its slurmctld is alive)."""
    try:
        return psutil.pid_exists(int(Path(CLUSTER_ENV["TFDIST_SLURM_DIR"], "slurmctld.run.pid").read_text()))
    except (OSError, ValueError):
        return False


#: The hosts whose processes the current test killed (:meth:`Hosts.kill`).
_KILLED: set[str] = set()


def repair_killed() -> None:
    """After a test that killed hosts: where the Slurm cluster runs on them, each one's slurmd started again
    and awaited until Slurm takes the node back, so that the cluster is whole for the next test (node1, the
    controller's host, is never killed by a test)."""
    killed = sorted(_KILLED)
    _KILLED.clear()
    if not killed or not slurm_runs():
        return
    env = {
        **clean_env(),
        **CLUSTER_ENV,
        "SLURM_CONF": os.path.join(CLUSTER_ENV["TFDIST_SLURM_DIR"], "slurm.conf"),
    }
    for host in killed:
        back = subprocess.run(
            [SLURM_SCRIPT, "node-start", host], env=env, capture_output=True, text=True, timeout=120
        )
        assert back.returncode == 0, back.stderr
    deadline = time.monotonic() + 120
    for host in killed:
        while True:
            state = subprocess.run(
                [HOSTS_SCRIPT, "exec", "node1", "--", "sinfo", "-h", "-n", host, "-o", "%t"],
                env=env,
                capture_output=True,
                text=True,
                timeout=30,
            ).stdout.strip()
            if state in ("idle", "mix", "alloc"):
                break
            assert time.monotonic() < deadline, f"Slurm did not take {host} back after its repair: {state}"
            time.sleep(0.5)


def kill_slurm(slurm_dir: str) -> None:
    """SIGKILL the daemons of the Slurm cluster in ``slurm_dir`` (their recorded PIDs) before
    ``slurm-local.sh stop`` cleans up after them: a test cluster's state is thrown away, and a graceful
    shutdown of each daemon (polled every 0.1 s) cost a test run 15-20 s at its end."""
    for record in Path(slurm_dir).glob("*.run.pid"):
        try:
            os.kill(int(record.read_text()), signal.SIGKILL)
        except (ValueError, OSError):
            continue


def slurm_daemons() -> set[int]:
    """The PIDs of the test hosts' Slurm daemons (recorded by slurm-local.sh) and of their children."""
    pids: set[int] = set()
    for record in Path(CLUSTER_ENV["TFDIST_SLURM_DIR"]).glob("*.run.pid"):
        try:
            daemon = psutil.Process(int(record.read_text()))
            pids |= {daemon.pid, *(child.pid for child in daemon.children(recursive=True))}
        except (ValueError, OSError, psutil.Error):
            continue
    return pids


def make_hosts() -> Iterator[Hosts]:
    """node1..node3 under the tests' prefix for the whole run (skipped where test hosts cannot be made);
    removed afterwards. The session's ``testhosts`` fixture (tests/multihost/conftest.py)."""
    reason = unavailable_reason()
    if reason:
        pytest.skip(f"no test hosts: {reason}")
    hosts = Hosts(clean_env())
    try:
        made = hosts.hosts_script("up", str(NODES))
        assert made.returncode == 0, made.stderr
        yield hosts
    finally:
        hosts.hosts_script("down")


@dataclass(frozen=True)
class Cluster(Hosts):
    """The multi-node Slurm on the test hosts (slurmctld on node1, one slurmd per host): submit and watch
    jobs; its clients run on node1."""

    conf: str = ""

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

    def slurm_script(self, *args: str) -> subprocess.CompletedProcess[str]:
        """``scripts/slurm-local.sh ARGS`` for this cluster (e.g. node-stop node2)."""
        return subprocess.run(
            [SLURM_SCRIPT, *args], env=self.env, capture_output=True, text=True, timeout=120
        )


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
        [HOSTS_SCRIPT, "check"], env={**os.environ, **HOSTS_ENV}, capture_output=True, text=True, timeout=30
    )
    return None if proc.returncode == 0 else (proc.stdout + proc.stderr).strip() or "cannot make test hosts"


def made_hosts(env: dict[str, str], count: int, *then: tuple[str, ...]) -> Iterator[None]:
    """Test hosts node1..node<count> under ``env``'s own prefix for one module (skipped where they cannot be
    made), with ``then``'s ``testhosts.sh`` commands run after; removed afterwards. Kept for a module that
    has not moved to the session's ``testhosts`` (tests/multihost/test_rendezvous.py); a new test uses
    ``testhosts``."""
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


def launch_on(host: str, env: dict[str, str], *args: str, cwd: Path | None = None) -> subprocess.Popen[str]:
    """`tfdist launch ARGS` started on a test host (in ``cwd``, else this directory); its output goes to a
    file (a pipe nobody reads while another node's launcher is awaited would fill and stall the job)."""
    output = tempfile.TemporaryFile("w+")  # noqa: SIM115 (closed by finish())
    proc = subprocess.Popen(
        [HOSTS_SCRIPT, "exec", host, "--", *TFDIST, "launch", *args],
        env=env,
        stdout=output,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=cwd,
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


def assert_ranks_equal_one_process(single: Path, out: Path, ranks: int) -> None:
    """Every rank's final weights (``out/weights-R.npy``) equal the one-process run's
    (``single/weights-0.npy``) to 1e-5."""
    import numpy as np

    reference = np.load(single / "weights-0.npy")
    for rank in range(ranks):
        difference = np.max(np.abs(np.load(out / f"weights-{rank}.npy") - reference))
        assert difference <= 1e-5, (str(out), rank, difference)


def wait_for(what: str, check: Callable[[], bool], timeout: float = 120, every: float = 0.05) -> float:
    """Poll ``check()`` until true; the monotonic time it became true (fails naming ``what``)."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"no {what} within {timeout} s"
        time.sleep(every)
    return time.monotonic()
