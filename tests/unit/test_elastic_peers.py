"""Naming the peer that stopped answering when TensorFlow's error does not (a collective that timed out):
every task is knocked at once; real sockets on loopback for a live and a dead task."""

from __future__ import annotations

import socket
import time

from tfdist.diagnose import peers
from tfdist.launcher.records import lost_contact


def test_a_live_task_is_not_named_and_a_dead_one_is() -> None:
    live = socket.socket()
    live.bind(("127.0.0.1", 0))
    live.listen(4)
    dead = socket.socket()
    dead.bind(("127.0.0.1", 0))  # bound, never listening: the kernel refuses connections
    try:
        cluster = {"worker": [f"127.0.0.1:{live.getsockname()[1]}", f"127.0.0.1:{dead.getsockname()[1]}"]}
        lost = peers.probe(cluster)
        assert len(lost) == 1 and lost[0].startswith("worker 1 ") and "refuses connections" in lost[0]
        assert f"(127.0.0.1:{dead.getsockname()[1]})" in lost[0]
    finally:
        live.close()
        dead.close()


def test_silent_tasks_are_knocked_at_once() -> None:
    def knock(address: str, timeout: float) -> str | None:
        time.sleep(timeout)  # a cut link: the connection attempt just waits
        return None if address.endswith(":1") else f"does not answer within {timeout:g} s"

    cluster = {"chief": ["10.0.0.1:1"], "worker": [f"10.0.0.{i}:2" for i in range(2, 10)]}
    started = time.monotonic()
    lost = peers.probe(cluster, timeout=0.5, knock=knock, name_of=lambda ip, _t: f"host{ip[-1]}")
    assert time.monotonic() - started < 3.5  # not 9 x 0.5 s one after another (+ reverse lookups)
    assert [line.split(" (")[0] for line in lost] == [f"worker {i} on host{i + 2}" for i in range(8)]


def test_the_report_names_the_peer_when_the_error_does_not(tmp_path) -> None:
    class DeadlineExceededError(Exception):
        pass

    dead = socket.socket()
    dead.bind(("127.0.0.1", 0))
    try:
        cluster = {"worker": [f"127.0.0.1:{dead.getsockname()[1]}"]}
        line = peers.report(DeadlineExceededError("Collective has timed out"), 8, cluster, "/c/ckpt-8", 8)
    finally:
        dead.close()
    assert line.startswith("lost contact with worker 0 ") and "at step 8 (DeadlineExceededError)" in line
    log = tmp_path / "worker0.log"
    log.write_text(f"[w0]: [tfdist r0] ERROR {line}\n" + "[w0]: traceback line\n" * 500)
    assert lost_contact(str(log)) == line
    assert lost_contact(str(tmp_path / "none.log")) is None
