"""A Ray cluster's address: the forms ``--ray ADDRESS`` takes, the cluster ``auto`` finds from here, and
whether it answers. The one home of these for ``tfdist launch --ray`` and ``tfdist env``; no Ray import.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from typing import Any

from tfdist.errors import ConfigError
from tfdist.nodes import parse_address, split_address

#: A ``HOST:PORT`` address that does not accept a connection within this time is reported as unreachable.
CONNECT_TIMEOUT_S = 5.0


def check_address(address: str) -> str:
    """``--ray ADDRESS``: ``auto`` (RAY_ADDRESS or this machine's cluster), ``HOST:PORT`` or ``ray://HOST:PORT``.

    Input/Output: ``"10.0.0.1:6379"`` -> same; ``"train.py"`` -> ConfigError naming the form.
    """
    text = address.strip()
    if text == "auto" or text.startswith("ray://"):
        return text
    parse_address(
        text,
        "--ray-address",
        "the head's GCS address, as ray start --head prints it, ray://HOST:PORT, or --ray alone for the "
        "cluster RAY_ADDRESS names",
    )
    return text


def answers(address: str, timeout: float) -> OSError | None:
    """``None`` when a ``[ray://]HOST:PORT`` address accepts a TCP connection now, else the error."""
    host, port = split_address(address.removeprefix("ray://"))
    if not host or not port.isdigit():
        return OSError(f"{address!r} is not HOST:PORT")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            return None
    except OSError as exc:
        return exc


def check_reachable(address: str, timeout: float = CONNECT_TIMEOUT_S) -> None:
    """``--ray HOST:PORT`` accepts TCP connections, else one line (``auto``, ``ray://``: left to Ray)."""
    if address == "auto" or address.startswith("ray://"):
        return
    exc = answers(address, timeout)
    if exc is not None:
        reason = "timed out" if isinstance(exc, TimeoutError) else (exc.strerror or str(exc))
        raise ConfigError(
            f"--ray-address {address}: no Ray cluster answers there ({reason}). Hint: the address ray start "
            "--head printed (its GCS port, 6379 by default), reachable from this machine."
        )


def find_cluster(environ: Mapping[str, str], timeout: float = 1.0) -> dict[str, Any] | None:
    """The Ray cluster ``ray.init(address="auto")`` would join from here, and whether it answers; or None."""
    address, where = environ.get("RAY_ADDRESS", "").strip(), "RAY_ADDRESS"
    if not address:
        root = environ.get("RAY_TMPDIR") or environ.get("TMPDIR") or "/tmp"
        where = os.path.join(root, "ray", "ray_current_cluster")
        try:
            with open(where, encoding="utf-8") as fh:
                address = fh.read().strip()
        except OSError:
            return None
    if not address or address == "auto":
        return None
    return {"address": address, "from": where, "answers": answers(address, timeout) is None}
