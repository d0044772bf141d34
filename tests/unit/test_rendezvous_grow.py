"""A node that arrives while a job runs makes it grow: a real server on loopback, a running round of one
node holding its connection as a launcher does, and a newcomer whose join waits; what each is told."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from tfdist.errors import ConfigError
from tfdist.launcher.rendezvous import client, protocol
from tfdist.launcher.rendezvous.protocol import Assignment, JoinRequest, Notice
from tfdist.launcher.rendezvous.server import RendezvousServer


def request(name: str) -> JoinRequest:
    return JoinRequest(name=name, nproc=1, command="train.py", digest="d", ports=(4000,), pid=1)


class Joining(threading.Thread):
    """One node's join (it blocks until a round takes the node, or it is refused)."""

    def __init__(self, port: int, name: str) -> None:
        super().__init__(daemon=True)
        self.port, self.name_ = port, name
        self.held: list[socket.socket] = []
        self.result: Assignment | Exception | None = None
        self.start()

    def run(self) -> None:
        try:
            self.result = client.join(
                "127.0.0.1", self.port, lambda: "s", request(self.name_), 20, hold=self.held
            )
            for sock in self.held:
                sock.setblocking(False)
        except (ConfigError, OSError) as exc:
            self.result = exc

    def assignment(self, timeout: float = 15.0) -> Assignment:
        self.join(timeout)
        assert isinstance(self.result, Assignment), self.result
        return self.result


class Job:
    """A server for 1 to 2 nodes (``rounds``: 1, no restart allowed) and node ``a`` running alone."""

    def __init__(self, grow_after: float | None, rounds: int = 1) -> None:
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        self.port = listener.getsockname()[1]
        self.server = RendezvousServer(
            listener,
            "s",
            2,
            20.0,
            f"127.0.0.1:{self.port}",
            min_nodes=1,
            rounds=rounds,
            last_call=0.2,
            grow_after=grow_after,
        ).start()
        self.a = Joining(self.port, "a")
        self.formed = self.a.assignment()
        self.formed_at = time.monotonic()
        self.inbox = bytearray()

    def notice(self, wait: float, held: list[socket.socket] | None = None) -> Notice | None:
        """What ``a`` reads within ``wait`` seconds (on ``held``, else its first connection), or None."""
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            found = client.notice(self.a.held if held is None else held, self.inbox)
            if found is not None:
                return found
            time.sleep(0.02)
        return None


@pytest.fixture
def job(request: pytest.FixtureRequest) -> Iterator[Job]:
    made = Job(*getattr(request, "param", (0.0,)))
    yield made
    made.server.stop()


def test_a_node_that_arrives_makes_the_running_round_grow_without_a_restart(job: Job) -> None:
    assert job.formed.names == ("a",)
    newcomer = Joining(job.port, "b")
    notice = job.notice(5.0)
    assert notice == Notice("b", "the job grows to 2 node(s)", grow=2)
    assert notice.line() == "node b waits to join: the job grows to 2 node(s)"
    assert newcomer.is_alive()  # it waits for the round that takes it
    # a's workers stopped at a step boundary: it meets again, and the round forms with b at once, although
    # the server allows no restart (rounds=1): growing spends none.
    again = Joining(job.port, "a")
    assert again.assignment().names == newcomer.assignment().names == ("a", "b")
    assert again.assignment().round == 1
    assert job.notice(0.5, again.held) is None  # a's old connection closing is no news


@pytest.mark.parametrize("job", [(None, 2)], indirect=True)
def test_never_leaves_the_newcomer_waiting_for_a_restart_and_the_round_untold(job: Job) -> None:
    newcomer = Joining(job.port, "b")
    assert job.notice(1.5) is None
    assert newcomer.is_alive()


@pytest.mark.parametrize("job", [(None, 1)], indirect=True)
def test_never_without_a_restart_left_tells_the_newcomer_at_once(job: Job) -> None:
    newcomer = Joining(job.port, "b")
    newcomer.join(5.0)
    assert isinstance(newcomer.result, ConfigError) and "no restart left" in str(newcomer.result)


@pytest.mark.parametrize("job", [(2.0,)], indirect=True)
def test_a_round_grows_only_once_it_ran_the_policys_interval(job: Job) -> None:
    Joining(job.port, "b")
    notice = job.notice(6.0)
    assert notice is not None and notice.grow == 2
    assert time.monotonic() - job.formed_at >= 2.0


def test_a_round_that_cannot_grow_now_says_why_to_the_newcomer_and_runs_on(job: Job) -> None:
    newcomer = Joining(job.port, "b")
    assert job.notice(5.0) is not None
    for sock in job.a.held:
        sock.setblocking(True)
        sock.sendall(protocol.encode({"decline": "global batch 9 is not divisible by 2 replicas"}))
        sock.setblocking(False)
    newcomer.join(5.0)
    assert isinstance(newcomer.result, ConfigError), newcomer.result
    assert str(newcomer.result).endswith(
        f"the job at 127.0.0.1:{job.port} cannot take node b while it runs: global batch 9 is not divisible "
        "by 2 replicas (said node a). It takes new nodes at its next restart; start this node again then, "
        "or with the next job."
    )
    # The round runs on, and a failure in it is news again: a third node is not told about, a's own
    # leave is (to nobody here), and the server still holds a.
    assert job.server.members.keys() == {"a"} and not job.server.noticed
