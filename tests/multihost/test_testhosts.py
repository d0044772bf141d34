"""scripts/testhosts.sh itself: hosts with their own address, name and link; a cap, a cut, a kill; a
teardown that removes exactly what it made. On the run's test hosts (``testhosts``); the teardown case makes
a second set of its own beside them."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from hostcluster import HOSTS_SCRIPT, PREFIX, SUBNET, Hosts

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


def namespaces() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=10).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


def throughput(hosts: Hosts, seconds: float = 1.5) -> float:
    """Mbit/s from node3 to node1."""
    receiver = subprocess.Popen(
        [HOSTS_SCRIPT, "exec", "node1", "--", PY, "-c", RECEIVER],
        env=hosts.env,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        sent = hosts.on("node3", PY, "-c", SENDER, "node1", str(seconds))
        assert sent.returncode == 0, sent.stderr
        out, _ = receiver.communicate(timeout=30)
    finally:
        if receiver.poll() is None:
            receiver.kill()
            receiver.wait(timeout=10)
    return float(out.strip())


def test_each_host_has_its_own_name_address_and_view_of_the_others(testhosts: Hosts) -> None:
    for i in (1, 2, 3):
        proc = testhosts.on(f"node{i}", "sh", "-c", "hostname; ip -4 -o addr show eth0; getent hosts node2")
        name, address, peer = proc.stdout.splitlines()
        assert (
            name == f"node{i}"
            and f"inet {SUBNET}.{i}/24" in address
            and peer.split() == [f"{SUBNET}.2", "node2"]
        )
    # The machine itself is untouched: no route into the test switch from here.
    assert SUBNET not in subprocess.run(["ip", "route"], capture_output=True, text=True, timeout=10).stdout


def test_a_cap_slows_the_link_and_lifting_it_restores_it(testhosts: Hosts) -> None:
    free = throughput(testhosts)
    assert testhosts.hosts_script("cap", "node3", "50mbit").returncode == 0
    try:
        capped = throughput(testhosts)
    finally:
        assert testhosts.hosts_script("cap", "node3", "off").returncode == 0
    print(f"uncapped {free:.0f} Mbit/s, capped at 50mbit: {capped:.1f} Mbit/s")
    assert 25 < capped <= 60 < free


def test_a_cut_host_stops_answering_until_plugged_back(testhosts: Hosts) -> None:
    probe = "import socket, sys; socket.create_connection(('node2', 22), timeout=2)"
    # Plugged in, node2 answers at once (nothing listens on 22: connection refused, not a timeout).
    answered = testhosts.on("node1", PY, "-c", probe)
    assert "ConnectionRefusedError" in answered.stderr
    assert testhosts.hosts_script("cut", "node2").returncode == 0
    try:
        started = time.monotonic()
        silent = testhosts.on("node1", PY, "-c", probe)
        assert "TimeoutError" in silent.stderr or "timed out" in silent.stderr, silent.stderr
        assert time.monotonic() - started >= 1.5
    finally:
        assert testhosts.hosts_script("plug", "node2").returncode == 0
    assert "ConnectionRefusedError" in testhosts.on("node1", PY, "-c", probe).stderr


def test_kill_ends_every_process_of_a_host(testhosts: Hosts) -> None:
    sleeper = subprocess.Popen([HOSTS_SCRIPT, "exec", "node3", "--", "sleep", "120"], env=testhosts.env)
    try:
        deadline = time.monotonic() + 10
        while "sleep" not in testhosts.on("node3", "ps", "-e", "-o", "comm").stdout:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        killed = testhosts.kill("node3")
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
def test_bad_input_is_one_line(testhosts: Hosts, args: tuple[str, ...], expected: str) -> None:
    proc = testhosts.hosts_script(*args)
    assert proc.returncode == 2 and expected in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr


def test_down_removes_exactly_what_up_made(testhosts: Hosts) -> None:
    """A second set of hosts beside the run's (its prefix and subnet derived from theirs): its `down` leaves
    the run's hosts alone; a crashed run's leftovers go with the next `up`."""
    other = f"{PREFIX}2"
    env = {
        **testhosts.env,
        "TFDIST_HOSTS_PREFIX": other,
        "TFDIST_HOSTS_SUBNET": SUBNET.rsplit(".", 1)[0] + ".1",
    }
    run = lambda *a: subprocess.run(  # noqa: E731
        [HOSTS_SCRIPT, *a], env=env, capture_output=True, text=True, timeout=60
    )
    ours = {f"{PREFIX}-sw", f"{PREFIX}-node1", f"{PREFIX}-node2", f"{PREFIX}-node3"}
    assert run("up", "2").returncode == 0
    try:
        before = namespaces()
        assert {f"{other}-sw", f"{other}-node1", f"{other}-node2"} <= before and ours <= before
        assert run("up", "1").returncode == 0  # again, as after a crash: the old hosts are replaced
        now = namespaces()
        assert {f"{other}-sw", f"{other}-node1"} <= now and f"{other}-node2" not in now and ours <= now
    finally:
        assert run("down").returncode == 0
    assert not {n for n in namespaces() if n.startswith(f"{other}-")} and ours <= namespaces()
    assert not Path(f"/tmp/{other}-hosts").exists() and Path(f"/tmp/{PREFIX}-hosts").exists()
