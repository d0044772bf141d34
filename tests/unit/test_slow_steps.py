"""When steps count as slow, and which node's link a worker's connection times name (pure parts)."""

from __future__ import annotations

import pytest

from tfdist.diagnose.slowness import SlowSteps, answers, verdict


def feed(per_step: list[float]) -> list[float | None]:
    """Read points one step apart, each ``per_step[i]`` seconds after the one before."""
    steps, now, said = SlowSteps(), 0.0, []
    said.append(steps.observe(0, now))
    for step, seconds in enumerate(per_step, start=1):
        now += seconds
        said.append(steps.observe(step, now))
    return said


@pytest.mark.parametrize(
    ("per_step", "told_at", "seconds"),
    [
        ([3.0, 0.1, 0.1, 0.1, 2.0, 2.0, 2.0], 6, 2.0),  # the first point (tracing) is not the usual
        ([3.0, 0.1, 0.1, 0.1, 2.0, 0.1, 2.0, 0.1], None, None),  # single slow steps are hiccups
        ([3.0, 0.1, 0.1, 0.1, 0.4, 0.4, 0.4], None, None),  # 4x: slower, not slow
        ([3.0, 1.0, 1.0, 1.0, 1.4, 1.4, 1.4], None, None),  # 0.4 s more: not slow
        ([3.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0], None, None),  # slow from the start: that is its usual
        ([3.0, 0.1, 0.1, 2.0, 2.0, 2.0], 6, 2.0),  # the usual is a median: one slow point does not move it
        ([3.0, 0.1, 0.1, 0.1, 2.0, 2.0, 2.0, 2.0, 2.0], 6, 2.0),  # told once
    ],
)
def test_when_steps_are_slow(per_step: list[float], told_at: int | None, seconds: float | None) -> None:
    said = feed(per_step)
    told = [i for i, value in enumerate(said) if value is not None]
    assert told == ([told_at] if told_at is not None else [])
    if told_at is not None:
        assert said[told_at] == pytest.approx(seconds)


@pytest.mark.parametrize(
    ("own", "times", "expected"),
    [
        (
            "node1",
            {"node1": 0.1, "node2": 95.0, "node3": 0.3},
            "node2 is slow to answer (node2 95.0 ms; node3 0.3 ms): its link or host is slow",
        ),
        (
            "node2",
            {"node1": 90.0, "node2": 0.1, "node3": 97.0},
            "every other node is slow to answer from here (node3 97.0 ms, node1 90.0 ms): "
            "this node's (node2) link is slow",
        ),
        (
            "node1",
            {"node1": 0.1, "node2": 60.0},
            "the link between node1 and node2 is slow (node2 60.0 ms; from here the two ends look alike)",
        ),
        ("node1", {"node1": 0.1, "node2": 0.4}, "every node answers at once (node2 0.4 ms)"),
        # Measured on test hosts: node3 waits on node2 too, but far less than node2's own queue; from
        # node2 itself every round trip is long.
        (
            "node1",
            {"node2": 98.5, "node3": 22.8},
            "node2 is slow to answer (node2 98.5 ms; node3 22.8 ms): its link or host is slow",
        ),
        ("node2", {"node3": 197.5, "node1": 78.4}, "every other node is slow to answer from here"),
        ("node3", {"node2": 46.0, "node1": 6.7}, "node2 is slow to answer"),
        ("node2", {"node3": 140.0, "node1": 20.0, "backlog": 98_000}, "98 kB wait in this host's send queue"),
        ("node1", {"node2": 138.0, "node3": 19.2, "backlog": 0}, "node2 is slow to answer"),
    ],
)
def test_which_link_is_slow(own: str, times: dict[str, float], expected: str) -> None:
    backlog = times.pop("backlog", None)
    assert verdict(own, times, None if backlog is None else int(backlog)).startswith(expected)


def test_answers_are_medians_per_host_over_the_samples() -> None:
    samples = iter([{"a": 1.0, "b": 50.0}, {"a": 3.0, "b": 60.0}, {"a": 2.0}, {"a": 9.0}, {"a": 2.5}])
    got = answers({"a", "b"}, measure=lambda _hosts: next(samples), pause=0.0)
    assert got == {"a": 2.5, "b": 55.0}


def test_the_round_trips_of_this_process_s_connections_are_read(tmp_path: object) -> None:
    """A real loopback connection: its kernel round-trip estimate is found by the peer's address."""
    import socket

    from tfdist.diagnose.slowness import _tcp_rtts

    with socket.create_server(("127.0.0.1", 0)) as server:
        client = socket.create_connection(server.getsockname())
        peer, _ = server.accept()
        client.sendall(b"x" * 1000)
        peer.recv(1000)
        try:
            found = _tcp_rtts({"127.0.0.1"})
        finally:
            client.close()
            peer.close()
    assert set(found) == {"127.0.0.1"} and 0.0 <= found["127.0.0.1"] < 20.0
