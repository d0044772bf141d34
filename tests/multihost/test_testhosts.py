"""scripts/testhosts.sh itself: hosts with their own address, name and link; a cap, a cut, a kill; a
teardown that removes exactly what it made. Uses its own prefix and subnet (not the Slurm cluster's hosts)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hostcluster import HOSTS_SCRIPT, unavailable_reason

ENV = {"TFDIST_HOSTS_PREFIX": "tfdh", "TFDIST_HOSTS_SUBNET": "10.79.0"}
PY = sys.executable

# Receives for a while and prints the Mbit/s it got; the sender sends as fast as it can.
RECEIVER = """
import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 17001)); s.listen(1); s.settimeout(20)
c, _ = s.accept(); c.settimeout(10)
total, start = 0, None
while True:
    data = c.recv(1 << 20)
    if not data:
        break
    start = start or time.perf_counter()
    total += len(data)
print(total * 8 / (time.perf_counter() - start) / 1e6)
"""
SENDER = """
import socket, sys, time
for _ in range(100):
    try:
        c = socket.create_connection((sys.argv[1], 17001), timeout=5); break
    except OSError:
        time.sleep(0.1)
chunk, end = b"x" * (1 << 20), time.perf_counter() + float(sys.argv[2])
while time.perf_counter() < end:
    c.sendall(chunk)
c.close()
"""


def hosts(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [HOSTS_SCRIPT, *args], env={**os.environ, **ENV}, capture_output=True, text=True, timeout=timeout
    )


def namespaces() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=10).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


@pytest.fixture(scope="module")
def three_hosts() -> Iterator[None]:
    reason = unavailable_reason()
    if reason:
        pytest.skip(f"no test hosts: {reason}")
    made = hosts("up", "3")
    assert made.returncode == 0, made.stderr
    yield
    hosts("down")


def throughput(seconds: float = 1.5) -> float:
    """Mbit/s from node3 to node1."""
    receiver = subprocess.Popen(
        [HOSTS_SCRIPT, "exec", "node1", "--", PY, "-c", RECEIVER],
        env={**os.environ, **ENV},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        sent = hosts("exec", "node3", "--", PY, "-c", SENDER, "node1", str(seconds))
        assert sent.returncode == 0, sent.stderr
        out, _ = receiver.communicate(timeout=30)
    finally:
        if receiver.poll() is None:
            receiver.kill()
            receiver.wait(timeout=10)
    return float(out.strip())


def test_each_host_has_its_own_name_address_and_view_of_the_others(three_hosts: None) -> None:
    for i in (1, 2, 3):
        proc = hosts(
            "exec", f"node{i}", "--", "sh", "-c", "hostname; ip -4 -o addr show eth0; getent hosts node2"
        )
        name, address, peer = proc.stdout.splitlines()
        assert (
            name == f"node{i}"
            and f"inet 10.79.0.{i}/24" in address
            and peer.split() == ["10.79.0.2", "node2"]
        )
    # The machine itself is untouched: no route into the test switch from here.
    assert "10.79.0" not in subprocess.run(["ip", "route"], capture_output=True, text=True, timeout=10).stdout


def test_a_cap_slows_the_link_and_lifting_it_restores_it(three_hosts: None) -> None:
    free = throughput()
    assert hosts("cap", "node3", "50mbit").returncode == 0
    try:
        capped = throughput()
    finally:
        assert hosts("cap", "node3", "off").returncode == 0
    print(f"uncapped {free:.0f} Mbit/s, capped at 50mbit: {capped:.1f} Mbit/s")
    assert 25 < capped <= 60 < free


def test_a_cut_host_stops_answering_until_plugged_back(three_hosts: None) -> None:
    probe = "import socket, sys; socket.create_connection(('node2', 22), timeout=2)"
    # Plugged in, node2 answers at once (nothing listens on 22: connection refused, not a timeout).
    answered = hosts("exec", "node1", "--", PY, "-c", probe)
    assert "ConnectionRefusedError" in answered.stderr
    assert hosts("cut", "node2").returncode == 0
    try:
        started = time.monotonic()
        silent = hosts("exec", "node1", "--", PY, "-c", probe)
        assert "TimeoutError" in silent.stderr or "timed out" in silent.stderr, silent.stderr
        assert time.monotonic() - started >= 1.5
    finally:
        assert hosts("plug", "node2").returncode == 0
    assert "ConnectionRefusedError" in hosts("exec", "node1", "--", PY, "-c", probe).stderr


def test_kill_ends_every_process_of_a_host(three_hosts: None) -> None:
    sleeper = subprocess.Popen(
        [HOSTS_SCRIPT, "exec", "node3", "--", "sleep", "120"], env={**os.environ, **ENV}
    )
    try:
        deadline = time.monotonic() + 10
        while "sleep" not in hosts("exec", "node3", "--", "ps", "-e", "-o", "comm").stdout:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        killed = hosts("kill", "node3")
        assert killed.returncode == 0 and "node3: killed" in killed.stderr
        assert sleeper.wait(timeout=10) == -9
    finally:
        if sleeper.poll() is None:
            sleeper.kill()


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("exec", "node9", "--", "true"), "host 'node9' does not exist"),
        (("exec", "db1", "--", "true"), "unknown host 'db1'"),
        (("cap", "node1", "fast"), "rate 'fast' must look like 1gbit"),
        (("up", "0"), "host count '0' must be 1..200"),
    ],
)
def test_bad_input_is_one_line(three_hosts: None, args: tuple[str, ...], expected: str) -> None:
    proc = hosts(*args)
    assert proc.returncode == 2 and expected in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr


def test_down_removes_exactly_what_up_made(tmp_path: Path) -> None:
    """Another set of hosts (another prefix) survives; a crashed run's leftovers go with the next `up`."""
    if unavailable_reason():
        pytest.skip(f"no test hosts: {unavailable_reason()}")
    other = {"TFDIST_HOSTS_PREFIX": "tfdo", "TFDIST_HOSTS_SUBNET": "10.80.0"}
    run = lambda *a: subprocess.run(  # noqa: E731
        [HOSTS_SCRIPT, *a], env={**os.environ, **other}, capture_output=True, text=True, timeout=60
    )
    assert run("up", "2").returncode == 0
    try:
        before = namespaces()
        assert {"tfdo-sw", "tfdo-node1", "tfdo-node2"} <= before
        assert run("up", "1").returncode == 0  # again, as after a crash: the old hosts are replaced
        assert {"tfdo-sw", "tfdo-node1"} <= namespaces() and "tfdo-node2" not in namespaces()
    finally:
        assert run("down").returncode == 0
    assert not {n for n in namespaces() if n.startswith("tfdo-")}
    assert not Path("/tmp/tfdo-hosts").exists()
