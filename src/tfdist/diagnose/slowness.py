"""When steps turn slow on a multi-worker job: say so once, and which node's link is slow (a saturated link
fills this host's send queues and grows the kernel's round-trip estimates to the peer behind it)."""

from __future__ import annotations

import json
import os
import socket
import statistics
import struct
import subprocess
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field

from tfdist import variables
from tfdist._log import get_logger
from tfdist.nodes import address_of, host_name, split_address

log = get_logger(__name__)

#: A step is slow at this many times the usual step time (and at least :data:`MIN_EXTRA_S` longer).
SLOW_FACTOR = 5.0
MIN_EXTRA_S = 0.5
#: Read points whose step time makes the usual one (after the first, which includes tracing).
BASELINE_POINTS = 3
#: Consecutive slow read points before the job is told (one slow step is a hiccup, not a slow link).
SLOW_POINTS = 2
#: A round trip this long crosses a queue (an uncongested link takes well under 1 ms), and this many times
#: the fastest node's.
SLOW_RTT_MS = 20.0
NEAR_FASTEST = 2.0
#: From a node behind the slow link, every round trip is at least this long (docs: failures, measured).
ALL_SLOW_MS = 40.0
#: Bytes in this host's own send queues that mean its link cannot carry what it is given (an idle or fast
#: link keeps them near 0).
BACKLOG_BYTES = 16_000
SAMPLES = 5


@dataclass
class SlowSteps:
    """Decides, from the times of the read points, when the steps became slow (pure: no clock, no I/O)."""

    per_step: list[float] = field(default_factory=list)
    last: tuple[int, float] | None = None
    streak: int = 0
    told: bool = False

    @property
    def usual(self) -> float | None:
        """The usual seconds per step: the median of the first read points after the first one."""
        points = self.per_step[1 : 1 + BASELINE_POINTS]
        return statistics.median(points) if len(points) == BASELINE_POINTS else None

    def observe(self, step: int, now: float) -> float | None:
        """Record a read point (the global step, a monotonic time); the slow seconds per step the first time
        the steps are slow, else None."""
        if self.last is not None and step > self.last[0]:
            seconds = (now - self.last[1]) / (step - self.last[0])
            usual = self.usual
            if usual is None:
                self.per_step.append(seconds)
            elif seconds >= max(SLOW_FACTOR * usual, usual + MIN_EXTRA_S):
                self.streak += 1
            else:
                self.streak = 0
            if self.streak >= SLOW_POINTS and not self.told:
                self.told = True
                self.last = (step, now)
                return seconds
        self.last = (step, now)
        return None


def verdict(own: str, answers: Mapping[str, float], backlog: int | None = None) -> str:
    """Which node's link is slow, from the round trip (ms) of this worker's connections to each node and
    the bytes waiting in this host's own send queues (``backlog``; None: unknown). A full send queue or
    only long round trips mean this node's link; else the nodes well above the fastest are named."""
    others = {node: ms for node, ms in answers.items() if node != own}
    by_time = sorted(others, key=lambda n: -others[n])

    def said(nodes: Sequence[str]) -> str:
        return ", ".join(f"{n} {others[n]:.1f} ms" for n in nodes)

    fastest = min(others.values(), default=0.0)
    if backlog is not None and backlog >= BACKLOG_BYTES:
        return (
            f"{backlog / 1000:.0f} kB wait in this host's send queue (round trips {said(by_time)}): "
            f"this node's ({own}) link is slow"
        )
    if len(others) > 1 and fastest >= ALL_SLOW_MS:
        where = f"every other node is slow to answer from here ({said(by_time)})"
        return f"{where}: this node's ({own}) link is slow"
    slow = [n for n in by_time if others[n] >= max(SLOW_RTT_MS, NEAR_FASTEST * fastest)]
    if len(others) == 1 and others[by_time[0]] >= SLOW_RTT_MS:
        alike = "from here the two ends look alike"
        return f"the link between {own} and {by_time[0]} is slow ({said(by_time)}; {alike})"
    if slow:
        fast = [n for n in by_time if n not in slow]
        verb = "is" if len(slow) == 1 else "are"
        names = " and ".join(slow)
        return f"{names} {verb} slow to answer ({said(slow)}; {said(fast)}): its link or host is slow"
    return (
        f"every node answers at once ({said(by_time) or 'no other node'}): the links are not the cause "
        "(a busy host, the input pipeline?)"
    )


def _tcp_rtts(hosts: Collection[str]) -> dict[str, float]:
    """The largest smoothed round-trip time (ms) of this process's TCP connections to each of ``hosts``:
    the kernel's ``tcp_info.tcpi_rtt`` (us at byte 68), read through a duplicate of each descriptor."""
    found: dict[str, float] = {}
    for name in os.listdir("/proc/self/fd"):
        try:
            if not os.readlink(f"/proc/self/fd/{name}").startswith("socket:"):
                continue
            sock = socket.socket(fileno=os.dup(int(name)))  # its own family (gRPC's may be IPv6)
        except (OSError, ValueError):
            continue
        try:
            peer = sock.getpeername()
            host = str(peer[0]).removeprefix("::ffff:") if isinstance(peer, tuple) else None
            if host is not None and host in hosts:
                info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 104)
                rtt = struct.unpack_from("I", info, 68)[0] / 1000.0
                found[host] = max(found.get(host, 0.0), rtt)
        except (OSError, struct.error):
            pass
        finally:
            sock.close()
    return found


def _name_of(host: str) -> str:
    """The host's short name (a reverse lookup within a second), else the address as given."""
    name = host_name(host, 1.0)
    return name.split(".")[0] if name else host


def answers(
    hosts: Collection[str],
    measure: Callable[[Collection[str]], dict[str, float]] = _tcp_rtts,
    pause: float = 0.1,
) -> dict[str, float]:
    """Each host's median round trip (ms) over :data:`SAMPLES` reads of its connections' estimates."""
    by_host: dict[str, list[float]] = {}
    for n in range(SAMPLES):
        for host, ms in measure(hosts).items():
            by_host.setdefault(host, []).append(ms)
        if n + 1 < SAMPLES:
            time.sleep(pause)
    return {host: statistics.median(times) for host, times in by_host.items()}


def send_backlog() -> int | None:
    """Bytes waiting in this host's send queues but loopback's (``tc -s qdisc``); None without ``tc``."""
    try:
        proc = subprocess.run(["tc", "-s", "-j", "qdisc", "show"], capture_output=True, text=True, timeout=2)
        qdiscs = json.loads(proc.stdout) if proc.returncode == 0 else None
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
    if not isinstance(qdiscs, list):
        return None
    return sum(int(q.get("backlog", 0)) for q in qdiscs if isinstance(q, dict) and q.get("dev") != "lo")


def _queue(backlog: int | None) -> str:
    if backlog is None or backlog >= BACKLOG_BYTES:
        return ""  # unknown, or already said
    return f" (this host's send queue: {backlog / 1000:.0f} kB)"


def _address_of(host: str) -> str:
    """The IPv4 address ``host`` names (connections are known by address), else ``host``."""
    return address_of(host) or host


class SlowWatch:
    """The training loop's side: :meth:`observe` at every read point; once the steps are slow, the links
    are read on a background thread and one line is logged."""

    def __init__(self, cluster: Mapping[str, Sequence[str]], own_address: str | None) -> None:
        self.addresses = [a for role, tasks in cluster.items() if role != "evaluator" for a in tasks]
        self.own = split_address(own_address)[0] if own_address else None
        self.steps = SlowSteps()
        self.thread: threading.Thread | None = None
        self.line: str | None = None  # what was logged, once the check ran

    @property
    def active(self) -> bool:
        """Only a job of several tasks has links to blame."""
        return len(self.addresses) > 1 and self.own is not None

    def observe(self, step: int, now: float) -> None:
        """A read point of the loop: the global step and a monotonic time."""
        if not self.active:
            return
        seconds = self.steps.observe(step, now)
        if seconds is not None:
            usual = self.steps.usual or 0.0
            self.thread = threading.Thread(target=self._tell, args=(seconds, usual), daemon=True)
            self.thread.start()

    def _tell(self, seconds: float, usual: float) -> None:
        hosts = {_address_of(split_address(a)[0]) for a in self.addresses}
        backlogs = []
        for _ in range(SAMPLES):  # spread over half a second: a step's traffic comes in bursts
            backlogs.append(send_backlog())
            time.sleep(0.1)
        known = [b for b in backlogs if b is not None]
        measured = answers(hosts - {_address_of(self.own or "")})
        backlog = int(statistics.median(known)) if known else None
        named = {_name_of(host): ms for host, ms in measured.items()}
        own = _name_of(_address_of(self.own or ""))
        timeout = variables.get("TFDIST_COLLECTIVE_TIMEOUT")
        ratio = seconds / max(usual, 1e-9)
        self.line = (
            f"steps are slow: {seconds:.2f} s each, {ratio:.0f}x the usual {usual:.2f} s; "
            f"{verdict(own, named, backlog)}{_queue(backlog)}. The job goes on (a collective fails only "
            f"after TFDIST_COLLECTIVE_TIMEOUT={timeout:g} s)."
        )
        log.warning("%s", self.line)
