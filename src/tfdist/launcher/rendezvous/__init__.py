"""``--rdzv HOST:PORT``: the node that ``HOST`` names serves the endpoint, every node (that one included)
joins it with the job's token, and all receive the same :class:`Assignment`, again after every failure."""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import socket
import time
from dataclasses import dataclass

from tfdist import variables
from tfdist.errors import ConfigError
from tfdist.launcher.rendezvous import client, protocol
from tfdist.launcher.rendezvous.protocol import Assignment, JoinRequest, Notice
from tfdist.launcher.rendezvous.server import LAST_CALL_S, RendezvousServer, keepalive
from tfdist.nodes import free_ports, parse_address

DEFAULT_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class RendezvousSpec:
    """``--rdzv HOST:PORT`` and its options (checked here; the meeting happens in :class:`Rendezvous`)."""

    endpoint: str
    timeout: float = DEFAULT_TIMEOUT_S
    token: str | None = None
    token_file: str | None = None
    #: With a range of nodes: seconds a round with the fewest nodes waits for more (None: the default).
    last_call: float | None = None
    #: With a range of nodes: seconds a round runs before newcomers make it grow (None: never).
    grow_every: float | None = 0.0

    def __post_init__(self) -> None:
        parse_endpoint(self.endpoint)
        if not self.timeout > 0:
            raise ConfigError(f"--rdzv-timeout={self.timeout} must be positive seconds.")
        if self.last_call is not None and not self.last_call >= 0:
            raise ConfigError(f"--rdzv-last-call={self.last_call} must be 0 or more seconds.")
        if self.grow_every is not None and not self.grow_every >= 0:
            raise ConfigError(f"--grow-every={self.grow_every} must be 0 or more seconds, or never.")

    @property
    def host(self) -> str:
        """The endpoint's host."""
        return parse_endpoint(self.endpoint)[0]

    @property
    def port(self) -> int:
        """The endpoint's port."""
        return parse_endpoint(self.endpoint)[1]


def parse_endpoint(text: str) -> tuple[str, int]:
    """``HOST:PORT`` -> ``(HOST, PORT)``; ConfigError naming the flag otherwise.

    >>> parse_endpoint("node1:29400")
    ('node1', 29400)
    """
    host, port = parse_address(text, "--rdzv", "e.g. node1:29400")
    return host.strip("[]"), port


def job_digest(parts: dict[str, object]) -> str:
    """What every node of one job must share (command and launch options), hashed."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def default_token_file(host: str, port: int) -> str:
    """Where the serving node writes the job's token when none is given (a shared home directory)."""
    return os.path.join(os.path.expanduser("~"), ".tfdist", "rdzv", f"{host}_{port}.token")


def serves(host: str) -> bool:
    """Whether ``host`` names this machine (an address of it can be bound), so this node serves."""
    try:
        infos = socket.getaddrinfo(host, None, socket.AF_INET, socket.SOCK_STREAM)
    except socket.gaierror:
        raise ConfigError(
            f"--rdzv: host {host!r} does not resolve on {socket.gethostname()}. Hint: the endpoint node's "
            "name as every node resolves it, or its address."
        ) from None
    for info in infos:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            try:
                probe.bind((str(info[4][0]), 0))
                return True
            except OSError:
                continue
    return False


def _token(spec: RendezvousSpec, serving: bool, deadline: float) -> str:
    """The job's secret: --rdzv-token, TFDIST_RDZV_TOKEN, or the token file (the server writes it)."""
    if spec.token:
        return spec.token
    from_env = variables.raw("TFDIST_RDZV_TOKEN")
    if from_env:
        return from_env
    path = spec.token_file or default_token_file(spec.host, spec.port)
    if serving and not os.path.exists(path):
        _write_secret(path, secrets.token_hex(32))
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise ConfigError(
                f"no rendezvous token: {path} did not appear within the rendezvous timeout. Hint: give "
                "--rdzv-token or TFDIST_RDZV_TOKEN on every node, or a --rdzv-token-file on a filesystem "
                "every node shares."
            )
        time.sleep(0.2)
    try:
        with open(path, encoding="utf-8") as fh:
            token = fh.read().strip()
    except OSError as exc:
        raise ConfigError(f"--rdzv-token-file {path!r} cannot be read: {exc.strerror}.") from None
    if not token:
        raise ConfigError(f"--rdzv-token-file {path!r} is empty.")
    return token


def _write_secret(path: str, token: str) -> None:
    """Create ``path`` readable by its owner only, atomically (a reader never sees half a token)."""
    os.makedirs(os.path.dirname(path) or ".", mode=0o700, exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(token + "\n")
    os.replace(tmp, path)


class Rendezvous:
    """This node's :class:`~tfdist.launcher.membership.Membership` of a job formed at ``--rdzv``: each node
    holds its last round's connection open, which tells the server it is alive, and on which the server
    tells it when another node failed or left (:meth:`notice`)."""

    #: Every node brings ports it found free on itself.
    ports_agreed = True

    def __init__(
        self,
        spec: RendezvousSpec,
        nodes: tuple[int, int],
        nproc: int,
        tasks: int,
        command: str,
        digest: str,
        *,
        restarts: int = 0,
        last_call: float = LAST_CALL_S,
    ) -> None:
        """``nodes``: the fewest and the most nodes of a round; ``restarts``: rounds after the first."""
        self.spec, self.nodes, self.nproc, self.tasks = spec, nodes, nproc, tasks
        self.command, self.digest = command, digest
        self.restarts, self.last_call = restarts, last_call
        self.serving = serves(spec.host)
        # This launcher's id in every join: tells its own retries from a twin of the same host name.
        self.launcher = secrets.token_hex(8)
        self.token: str | None = None
        self.held: list[socket.socket] = []
        self.server: RendezvousServer | None = None
        self._inbox = bytearray()

    def meet(self) -> Assignment:
        """The next round's assignment (ConfigError with one line when it does not form in time)."""
        deadline = time.monotonic() + self.spec.timeout
        if self.serving and self.token is None:
            self.token = _token(self.spec, True, deadline)
            self.server = self._serve(self.token)
        request = JoinRequest(
            name=socket.gethostname(),
            nproc=self.nproc,
            command=self.command,
            digest=self.digest,
            ports=tuple(free_ports(self.tasks, host="")),  # every interface: peers reach them remotely
            pid=os.getpid(),
            launcher=self.launcher,
        )

        def secret() -> str:
            if self.token is None:
                self.token = _token(self.spec, False, deadline)
            return self.token

        previous, self.held = self.held, []
        self._inbox.clear()
        try:
            left = max(0.1, deadline - time.monotonic())
            assignment = client.join(
                self.spec.host, self.spec.port, secret, request, left, hold=self.held, max_nodes=self.nodes[1]
            )
            for sock in self.held:
                sock.setblocking(False)  # read between polls of the workers (notice), never waited on
                keepalive(sock)  # a cut link is found within seconds on this side too
            return assignment
        finally:
            for sock in previous:  # after the new join was sent: the server never sees this node absent
                sock.close()

    def _serve(self, token: str) -> RendezvousServer | None:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            listener.bind(("0.0.0.0", self.spec.port))  # every interface: peers reach it by its address
            # A backlog for a burst of nodes arriving at once (the kernel caps it at net.core.somaxconn).
            listener.listen(max(128, min(4096, 2 * self.nodes[1])))
            return RendezvousServer(
                listener,
                token,
                self.nodes[1],
                self.spec.timeout,
                self.spec.endpoint,
                min_nodes=self.nodes[0],
                rounds=1 + self.restarts,
                last_call=self.last_call,
                grow_after=self.spec.grow_every,
            ).start()
        except OSError:
            # Taken: another job's rendezvous (the join below is told so) or another program.
            listener.close()
            return None

    def notice(self) -> Notice | None:
        """What the server said on the held connection about another node of this round (never blocks)."""
        return client.notice(self.held, self._inbox, self.spec.host)

    def _send(self, line: bytes) -> None:
        """``line`` on every held connection, waiting a second at most on each."""
        for sock in self.held:
            try:
                sock.settimeout(1.0)
                sock.sendall(line)
            except OSError:
                pass
            finally:
                sock.setblocking(False)

    def decline(self, why: str) -> None:
        """Tell the server that this node's workers cannot stop and resume now (the newcomers are told)."""
        self._send(protocol.encode({"decline": why[:400]}))

    def close(self, *, stop: bool = False, code: int = 0, why: str = "") -> None:
        """Leave the job; ``stop``: this node ends it for good (exit ``code``, ``why``), told the others."""
        self._send(protocol.encode({"leave": {"stop": stop, "code": code, "why": why[:400]}}))
        for sock in self.held:
            sock.close()
        self.held = []
        if self.server is not None:  # this launcher serves the endpoint: say goodbye to the others
            name = socket.gethostname()
            self.server.stop(Notice(name, why[:400] or "stopped", True, code) if stop else None)


__all__ = ["Assignment", "Notice", "Rendezvous", "RendezvousSpec", "job_digest", "parse_endpoint"]
