"""A node's side of the rendezvous: connect (retrying), authenticate, wait for the assignment."""

from __future__ import annotations

import contextlib
import errno
import socket
import time
from collections.abc import Callable

from tfdist.errors import ConfigError
from tfdist.launcher.rendezvous import protocol
from tfdist.launcher.rendezvous.protocol import Assignment, JoinRequest, Notice

RETRY_S = 0.2


def _read_line(sock: socket.socket, deadline: float, limit: int = protocol.MAX_MESSAGE) -> bytes:
    buffer = bytearray()
    while b"\n" not in buffer:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError
        sock.settimeout(min(remaining, 5.0))
        try:
            data = sock.recv(min(limit + 1, 1 << 20))
        except TimeoutError:
            continue
        if not data:
            raise ConnectionResetError
        buffer += data
        if len(buffer) > limit + 1:
            raise ValueError("message too long")
    return bytes(buffer.split(b"\n", 1)[0])


def join(
    host: str,
    port: int,
    token: Callable[[], str],
    request: JoinRequest,
    timeout: float,
    hold: list[socket.socket] | None = None,
    max_nodes: int | None = None,
) -> Assignment:
    """This node's assignment from the rendezvous at ``host:port`` (ConfigError with one line otherwise).

    ``token`` is asked for only once the endpoint answered (an unreachable endpoint is not a missing token
    file). With ``hold``, the connection that brought the assignment stays open, appended there (the server
    counts this node alive). ``max_nodes`` bounds the assignment read (:func:`protocol.reply_limit`)."""
    endpoint = f"{host}:{port}"
    deadline = time.monotonic() + timeout
    join_body = request.to_dict()
    limit = protocol.reply_limit(max_nodes or protocol.DEFAULT_MAX_NODES, len(request.ports))
    stage = "down"  # how the last try ended: no connection, dropped unanswered, or waiting for the others
    while time.monotonic() < deadline:
        try:
            sock = socket.create_connection(
                (host, port), timeout=min(5.0, max(0.1, deadline - time.monotonic()))
            )
        except socket.gaierror:
            raise ConfigError(
                f"--rdzv {endpoint}: host {host!r} does not resolve on {request.name}. Hint: the endpoint "
                "node's name as this node resolves it, or its address."
            ) from None
        except OSError:
            time.sleep(RETRY_S)  # not up yet: try again
            continue
        with contextlib.ExitStack() as closing:
            closing.callback(sock.close)
            try:
                hello = protocol.decode(_read_line(sock, deadline))
                if hello.get("hello") != protocol.VERSION or not isinstance(hello.get("nonce"), str):
                    raise ConfigError(
                        f"{endpoint} does not speak tfdist's rendezvous protocol. Hint: another --rdzv port."
                    )
                message = {"join": join_body, "mac": protocol.mac(token(), hello["nonce"], join_body)}
                sock.sendall(protocol.encode(message))
                stage = "waiting"
                reply = protocol.decode(_read_line(sock, deadline + 5.0, limit), limit)
            except TimeoutError:
                continue
            except (OSError, ValueError):
                stage = "crowded"  # dropped without an answer while strangers filled the server: again
                time.sleep(RETRY_S)
                continue
            if hold is not None and "assignment" in reply:
                closing.pop_all()  # kept open: the server's sign that this node lives
                hold.append(sock)
        if "error" in reply:
            raise ConfigError(str(reply["error"]))
        if "assignment" in reply:
            return Assignment.from_dict(reply["assignment"])
        raise ConfigError(f"{endpoint} sent an answer tfdist does not understand.")
    raise ConfigError(_unanswered(endpoint, host, timeout, stage))


def _unanswered(endpoint: str, host: str, timeout: float, stage: str) -> str:
    """Why no assignment came within ``timeout``, from how the last try ended."""
    if stage == "crowded":
        return (
            f"the rendezvous at {endpoint} kept dropping this node's connection unanswered for "
            f"{timeout:.0f} s: it is crowded by connections that never authenticate (strangers). Hint: "
            "firewall the --rdzv port to the job's nodes, or another --rdzv port."
        )
    if stage == "waiting":
        return (
            f"the rendezvous at {endpoint} gave no assignment within {timeout:.0f} s. Hint: start the same "
            "command on every node, or raise --rdzv-timeout."
        )
    return (
        f"the rendezvous endpoint {endpoint} did not answer within {timeout:.0f} s. Hint: start tfdist "
        f"launch on the node that {host} names (it serves the rendezvous), or check the address and port."
    )


def notice(held: list[socket.socket], inbox: bytearray, endpoint: str = "") -> Notice | None:
    """The server's notice on a held (non-blocking) connection, if one arrived; ``inbox`` keeps a partial
    line between calls. Never blocks. The connection's end is news too (timed out: host or link down;
    closed without ``bye``: the serving launcher is gone, a stop)."""
    for sock in list(held):
        try:
            data = sock.recv(protocol.MAX_MESSAGE)
        except BlockingIOError:
            data = None
        except OSError as exc:
            held.remove(sock)  # told once
            sock.close()
            if exc.errno in (errno.ETIMEDOUT, errno.EHOSTUNREACH):
                return Notice(endpoint, protocol.SILENT)
            return Notice(endpoint, protocol.ENDPOINT_GONE, stop=True)
        if data:
            inbox += data[: max(0, protocol.MAX_MESSAGE - len(inbox))]
        while b"\n" in inbox:
            line, _, rest = bytes(inbox).partition(b"\n")
            inbox[:] = rest
            try:
                message = protocol.decode(line)
            except ValueError:
                continue
            if message.get("bye"):
                held.remove(sock)
                sock.close()
                return None
            body = message.get("notice")
            if isinstance(body, dict):
                try:
                    return Notice.from_dict(body)
                except ValueError:
                    continue
        if data == b"":  # closed, and no bye came first
            held.remove(sock)
            sock.close()
            return Notice(endpoint, protocol.ENDPOINT_GONE, stop=True)
    return None
