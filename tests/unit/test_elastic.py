"""Elastic node counts: ``--nnodes MIN:MAX`` parsing, when a round forms, and rounds of a real rendezvous
server on loopback (a lost node, survivors that meet again at once, a node that joins at the next round)."""

from __future__ import annotations

import os
import socket
import threading
import time
from pathlib import Path

import pytest

from helpers.cli import cli
from tfdist.errors import ConfigError
from tfdist.launcher.rendezvous import client, protocol
from tfdist.launcher.rendezvous.protocol import Assignment, JoinRequest
from tfdist.launcher.rendezvous.server import RendezvousServer
from tfdist.nodes import NodeRange, parse_node_range


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("3", NodeRange(3, 3)),
        ("2:4", NodeRange(2, 4)),
        (" 1 : 1 ", NodeRange(1, 1)),
        ("1:3", NodeRange(1, 3)),
        ("2-4", NodeRange(2, 4)),  # sbatch's form too
    ],
)
def test_node_ranges(text: str, expected: NodeRange) -> None:
    assert parse_node_range(text, "--nnodes") == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("3:2", "--nnodes=3:2: MIN=3 is above MAX=2. Hint: write 2:3"),
        ("0:2", "--nnodes=0:2: MIN=0 must be at least 1 node"),
        ("2:x", "--nnodes='2:x' must be a number of nodes N or a range MIN:MAX"),
        ("0", "--nnodes=0 must be at least 1"),
        ("-1", "must be a number of nodes N or a range MIN:MAX"),
        ("2:3:4", "must be a number of nodes N or a range MIN:MAX"),
    ],
)
def test_bad_node_ranges(text: str, expected: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_node_range(text, "--nnodes")
    assert expected in str(info.value)


@pytest.mark.parametrize(
    ("joined", "live", "low", "high", "waited", "forms"),
    [
        (["a", "b", "c"], [], 3, 3, 0.0, True),  # the most nodes: at once
        (["a", "b"], [], 3, 3, 99.0, False),  # a fixed job waits for all (until the timeout)
        (["a", "b"], [], 2, 3, 1.0, False),  # first round: enough, but the last call is still open
        (["a", "b"], [], 2, 3, 10.0, True),  # ... and then it forms
        (["a", "b"], ["a", "b", "c"], 2, 3, 1.0, False),  # c holds its connection: wait for it
        (["a", "b"], ["a", "b"], 2, 3, 0.0, True),  # c is gone, every survivor is back: at once
        (["a"], ["a"], 2, 3, 99.0, False),  # below the fewest: never
        (["a", "d"], ["a"], 2, 3, 0.0, True),  # a survivor and a newcomer
        (["d"], ["a"], 1, 3, 60.0, False),  # a newcomer while a runs: never a second job beside it
        (["d", "e"], ["a"], 1, 2, 60.0, False),  # not even with MAX newcomers
    ],
)
def test_when_a_round_forms(
    joined: list[str], live: list[str], low: int, high: int, waited: float, forms: bool
) -> None:
    assert protocol.ready(joined, live, low, high, waited, last_call=10.0) is forms


def request(name: str) -> JoinRequest:
    return JoinRequest(name=name, nproc=1, command="train.py", digest="d", ports=(4000,), pid=1)


def serve(low: int, high: int, rounds: int, last_call: float = 30.0) -> tuple[RendezvousServer, int]:
    """A server whose newcomers wait for the next restart (``--grow-every never``; growing:
    tests/unit/test_rendezvous_grow.py)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    port = listener.getsockname()[1]
    server = RendezvousServer(
        listener,
        "s",
        high,
        20.0,
        f"127.0.0.1:{port}",
        min_nodes=low,
        rounds=rounds,
        last_call=last_call,
        grow_after=None,
    )
    return server.start(), port


def join_all(
    port: int, names: list[str], held: dict[str, list[socket.socket]], first: str | None = None
) -> dict[str, Assignment]:
    """Every name joins (each from its own thread, holding its connection; ``first`` half a second before
    the others); their assignments."""
    results: dict[str, Assignment] = {}

    def one(name: str) -> None:
        previous, held[name] = held.get(name, []), []
        try:
            results[name] = client.join("127.0.0.1", port, lambda: "s", request(name), 15, hold=held[name])
        finally:
            for sock in previous:
                sock.close()

    threads = [threading.Thread(target=one, args=(n,)) for n in names]
    for t, name in zip(threads, names, strict=True):
        if name == first:
            t.start()
            time.sleep(0.5)
    for t, name in zip(threads, names, strict=True):
        if name != first:
            t.start()
    for t in threads:
        t.join(timeout=30)
    return results


def test_survivors_meet_again_at_once_and_a_newcomer_waits_for_the_next_round() -> None:
    server, port = serve(2, 3, rounds=3)
    held: dict[str, list[socket.socket]] = {}
    try:
        first = join_all(port, ["c", "a", "b"], held)
        assert {a.names for a in first.values()} == {("a", "b", "c")} and first["c"].node_rank == 2
        for sock in held.pop("b"):  # b's launcher dies: its connection closes
            sock.close()
        started = time.monotonic()
        second = join_all(port, ["a", "c"], held)  # formed without waiting out the last call (30 s)
        assert time.monotonic() - started < 5
        assert second["c"].names == ("a", "c") and second["c"].node_rank == 1 and second["c"].round == 1
        assert "(round 1)" in second["a"].summary()
        # b is back while the job runs: it waits, and is taken when the others meet again.
        third = join_all(port, ["a", "b", "c"], held, first="b")
        assert third["b"].names == ("a", "b", "c") and third["b"].round == 2
        with pytest.raises(ConfigError, match="already formed"):  # no round left (1 + 2 restarts)
            client.join("127.0.0.1", port, lambda: "s", request("d"), 3)
    finally:
        for socks in held.values():
            for sock in socks:
                sock.close()
        server.stop()


def test_a_newcomer_never_forms_a_job_beside_the_running_one() -> None:
    """--nnodes 1:2 running on a alone: b arrives and waits for a's next restart (here: none comes, so its
    own timeout ends the wait); when the job ends, a waiting node is told so at once."""
    server, port = serve(1, 2, rounds=2, last_call=0.3)
    held: dict[str, list[socket.socket]] = {}
    try:
        assert join_all(port, ["a"], held)["a"].names == ("a",)  # formed alone after the last call
        with pytest.raises(ConfigError, match="gave no assignment within 2 s"):
            client.join("127.0.0.1", port, lambda: "s", request("b"), 2, hold=[])
        outcome: list[BaseException] = []

        def wait_as_b() -> None:
            try:
                client.join("127.0.0.1", port, lambda: "s", request("b"), 15, hold=[])
            except ConfigError as exc:
                outcome.append(exc)

        waiter = threading.Thread(target=wait_as_b)
        waiter.start()
        time.sleep(1.0)  # b waits; the job ends well on a
        started = time.monotonic()
        for sock in held.pop("a"):
            sock.close()
        server.stop()
        waiter.join(timeout=10)
        assert time.monotonic() - started < 5
        assert outcome and "ended before a restart could take this node" in str(outcome[0])
    finally:
        for socks in held.values():
            for sock in socks:
                sock.close()
        server.stop()


def test_a_round_short_of_the_fewest_nodes_ends_naming_the_lost_ones() -> None:
    server, port = serve(2, 2, rounds=2)
    server.timeout = 1.0  # the next round's wait
    held: dict[str, list[socket.socket]] = {}
    try:
        join_all(port, ["a", "b"], held)
        for sock in held.pop("b"):
            sock.close()
        with pytest.raises(ConfigError) as info:
            client.join("127.0.0.1", port, lambda: "s", request("a"), 10, hold=[])
        assert "only 1 of 2 node(s) arrived" in str(info.value) and "1 missing (b of the last round)" in str(
            info.value
        )
    finally:
        for socks in held.values():
            for sock in socks:
                sock.close()
        server.stop()


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--nnodes", "3:2", "--rdzv", "127.0.0.1:1"], "--nnodes=3:2: MIN=3 is above MAX=2"),
        (["--nnodes", "0:2", "--rdzv", "127.0.0.1:1"], "--nnodes=0:2: MIN=0 must be at least 1 node"),
        (["--nnodes", "2:x", "--rdzv", "127.0.0.1:1"], "--nnodes='2:x' must be a number of nodes"),
        (["--nnodes", "1:2", "--hosts", "a,b"], "--nnodes=1:2: a range of nodes needs --rdzv"),
        (["--nnodes", "1:2", "--rdzv", "127.0.0.1:1", "--rdzv-last-call", "-1"], "--rdzv-last-call="),
        (["--nnodes", "1:2", "--rdzv", "127.0.0.1:1", "--grow-every", "-5"], "--grow-every"),
        (["--nnodes", "1:2", "--rdzv", "127.0.0.1:1", "--grow-every", "soon"], "--grow-every"),
    ],
)
def test_bad_elastic_launches_are_one_line(
    argv: list[str], expected: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("print('hi')\n")
    code, _, err = cli(capsys, "launch", "--cpu", *argv, "train.py")
    assert code == 2 and expected in err, err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert os.listdir(tmp_path) == ["train.py"]  # nothing written
