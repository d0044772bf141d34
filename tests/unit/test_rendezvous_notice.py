"""The rendezvous tells the other nodes of a running round when one fails or leaves: a real server on
loopback, real connections held as launchers hold them; the notice each node reads, or none."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from tfdist.launcher.rendezvous import client, protocol
from tfdist.launcher.rendezvous.protocol import Assignment, JoinRequest, Notice
from tfdist.launcher.rendezvous.server import RendezvousServer

NAMES = ("a", "b", "c")


def request(name: str) -> JoinRequest:
    return JoinRequest(name=name, nproc=1, command="train.py", digest="d", ports=(4000,), pid=1)


class Job:
    """A server and three nodes holding the connections of the round they formed."""

    def __init__(self, rounds: int = 3) -> None:
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        self.port = listener.getsockname()[1]
        self.server = RendezvousServer(
            listener, "s", 3, 20.0, f"127.0.0.1:{self.port}", min_nodes=2, rounds=rounds, last_call=30.0
        ).start()
        self.held: dict[str, list[socket.socket]] = {}
        self.inbox = {name: bytearray() for name in NAMES}

    def join(self, names: tuple[str, ...]) -> dict[str, Assignment]:
        """Every name joins from its own thread (a new round), keeping its connection; the old one is
        closed after the new assignment, as a launcher does."""
        results: dict[str, Assignment] = {}

        def one(name: str) -> None:
            previous, self.held[name] = self.held.get(name, []), []
            try:
                results[name] = client.join(
                    "127.0.0.1", self.port, lambda: "s", request(name), 15, hold=self.held[name]
                )
                for sock in self.held[name]:
                    sock.setblocking(False)
            finally:
                for sock in previous:
                    sock.close()

        threads = [threading.Thread(target=one, args=(n,)) for n in names]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
        return results

    def notice(self, name: str, wait: float = 3.0) -> Notice | None:
        """The notice ``name`` reads within ``wait`` seconds, or None."""
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            found = client.notice(self.held.get(name, []), self.inbox[name])
            if found is not None:
                return found
            time.sleep(0.02)
        return None

    def leave(self, name: str, message: dict[str, object] | None) -> None:
        for sock in self.held.pop(name):
            if message is not None:
                sock.setblocking(True)
                sock.sendall(protocol.encode({"leave": message}))
            sock.close()

    def close(self) -> None:
        for socks in self.held.values():
            for sock in socks:
                sock.close()
        self.server.stop()


@pytest.fixture
def job() -> Iterator[Job]:
    made = Job()
    try:
        assert {a.names for a in made.join(NAMES).values()} == {NAMES}
        yield made
    finally:
        made.close()


def test_a_node_whose_launcher_is_gone_is_told_to_the_others_at_once(job: Job) -> None:
    job.leave("c", None)  # c's launcher died (its host lost power): the connection just closes
    for name in ("a", "b"):
        notice = job.notice(name)
        assert notice is not None and notice.by == "c" and not notice.stop, notice
        assert "node c left the job: its launcher's connection to the rendezvous closed" in notice.line()
    assert job.notice("a", wait=0.3) is None  # told once


def test_a_node_meeting_again_tells_the_others_once_and_they_form_the_next_round(job: Job) -> None:
    met: dict[str, Assignment] = {}
    rejoin = threading.Thread(target=lambda: met.update(job.join(("b",))))
    rejoin.start()  # b's workers failed: its launcher meets again while a and c still run theirs
    for name in ("a", "c"):
        notice = job.notice(name)
        assert notice == Notice("b", "its workers failed; it is meeting the others again"), notice
    assert job.notice("a", wait=0.2) is None
    met.update(job.join(("a", "c")))  # told: they meet again too, and the round forms at once
    rejoin.join(timeout=20)
    assert {a.round for a in met.values()} == {1} and met["b"].names == NAMES


def test_a_node_that_ended_well_tells_nobody(job: Job) -> None:
    job.leave("a", {"stop": False, "code": 0, "why": ""})
    assert job.notice("b", wait=0.5) is None and job.notice("c", wait=0.1) is None


def test_a_node_that_ended_the_job_for_good_passes_on_its_line_and_code(job: Job) -> None:
    line = "ConfigError: global batch 9 is not divisible by the 2 replicas; use 8 or 10."
    job.leave("a", {"stop": True, "code": 2, "why": line})
    notice = job.notice("c")
    assert notice == Notice("a", line, stop=True, code=2), notice
    assert notice.line() == f"node a ended the job: {line}"


def test_the_endpoint_closing_in_order_is_no_news_and_its_stop_is_passed_on(job: Job) -> None:
    job.server.stop(Notice("a", "stopped by SIGINT", stop=True, code=130))
    assert job.notice("b") == Notice("a", "stopped by SIGINT", True, 130)
    assert job.notice("c") == Notice("a", "stopped by SIGINT", True, 130)
    again = Job()
    try:
        again.join(NAMES)
        again.server.stop()  # its launcher ended well (its job may have finished before the others')
        assert again.notice("b", wait=0.5) is None and again.notice("c", wait=0.1) is None
    finally:
        again.close()


def test_an_endpoint_gone_without_a_word_ends_the_job() -> None:
    """The launcher serving the rendezvous died: its connection just closes, and no round can follow."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    assignment = Assignment(0, ("a",), ("127.0.0.1",), ((4000,),), 1, f"127.0.0.1:{port}")

    def serve_once() -> None:
        conn, _ = listener.accept()
        conn.sendall(protocol.encode({"hello": protocol.VERSION, "nonce": "00"}))
        conn.recv(protocol.MAX_MESSAGE)
        conn.sendall(protocol.encode({"assignment": assignment.to_dict(0)}))
        time.sleep(0.3)
        conn.close()  # no bye

    thread = threading.Thread(target=serve_once)
    thread.start()
    held: list[socket.socket] = []
    try:
        assert client.join("127.0.0.1", port, lambda: "s", request("a"), 10, hold=held) == assignment
        held[0].setblocking(False)
        deadline, found = time.monotonic() + 3, None
        while found is None and time.monotonic() < deadline:
            found = client.notice(held, bytearray(), "node1")
            time.sleep(0.02)
        assert found == Notice("node1", protocol.ENDPOINT_GONE, stop=True), found
        assert held == []  # told once
    finally:
        thread.join(timeout=5)
        listener.close()


@pytest.mark.parametrize(
    ("leave", "expected"),
    [
        (
            None,
            Notice(
                "n", "its launcher's connection to the rendezvous closed (the launcher or its host is gone)"
            ),
        ),
        ({"stop": False, "code": 0, "why": ""}, None),
        (
            {"stop": True, "code": 130, "why": "stopped by SIGINT"},
            Notice("n", "stopped by SIGINT", True, 130),
        ),
        ({"stop": True, "code": "x", "why": ""}, Notice("n", "stopped", True, 1)),
        ("silent", Notice("n", protocol.SILENT)),
    ],
)
def test_what_a_leaving_node_means(leave: dict[str, object] | str | None, expected: Notice | None) -> None:
    if leave == "silent":  # no leave line, and the connection timed out (keep-alive)
        assert protocol.leave_notice("n", None, silent=True) == expected
        return
    assert protocol.leave_notice("n", leave) == expected  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("notice", "unannounced"),
    [
        (protocol.leave_notice("n", None), True),  # its connection closed: host lost or launcher killed
        (protocol.leave_notice("n", None, silent=True), True),  # keep-alive: host or link down
        (Notice("endpoint", protocol.ENDPOINT_GONE, stop=True), True),
        (Notice("n", "its workers failed; it is meeting the others again"), False),
        (protocol.leave_notice("n", {"stop": True, "code": 2, "why": "ConfigError: bad flag"}), False),
    ],
)
def test_a_node_gone_without_a_word_is_told_apart_from_one_whose_workers_failed(
    notice: Notice | None, unannounced: bool
) -> None:
    """A local worker's failure at the moment a node vanished is reported as that node (the cause)."""
    assert notice is not None and notice.unannounced is unannounced
