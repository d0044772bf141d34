"""Node address lists (``--hosts``, ``--hostfile``): checked before anything starts. Pure.

Input/Output: ``check_hosts(("node1", "node2"), "--hosts")`` -> ``("node1", "node2")``;
``check_hosts(("node1", "node1"), "--hosts")`` -> ConfigError naming the repeated host.
"""

from __future__ import annotations

import ipaddress
import re

from tfdist.errors import ConfigError

# RFC 1123 host names: dot-separated labels of letters, digits and inner hyphens, 1-63 characters each.
_LABEL = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$")
_LOOPBACK_NAMES = ("localhost", "localhost.localdomain", "ip6-localhost")


def is_address(host: str) -> bool:
    """A host name (RFC 1123) or an IPv4 / IPv6 address."""
    try:
        ipaddress.ip_address(host.strip("[]"))
        return True
    except ValueError:
        pass
    return 0 < len(host) <= 253 and all(_LABEL.match(label) for label in host.rstrip(".").split("."))


def is_loopback(host: str) -> bool:
    """``localhost`` or a loopback address: reachable only from the machine itself."""
    if host.lower() in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_hosts(hosts: tuple[str, ...], where: str) -> tuple[str, ...]:
    """``hosts`` unchanged when every entry is a distinct, valid address that every node can reach."""
    for position, host in enumerate(hosts, 1):
        if not host:
            raise ConfigError(
                f"{where}: entry {position} is empty. Hint: one address per node, e.g. node1,node2."
            )
        if not is_address(host):
            raise ConfigError(
                f"{where}: {host!r} is not a host name or IP address (letters, digits, '-' and '.' only). "
                "Hint: give the nodes' names as the cluster resolves them."
            )
    seen: dict[str, int] = {}
    for position, host in enumerate(hosts, 1):
        key = host.lower().rstrip(".")
        if key in seen:
            raise ConfigError(
                f"{where}: {host!r} is listed twice (entries {seen[key]} and {position}); each node is one "
                "entry. Hint: for several workers per node use -n (--nproc-per-node)."
            )
        seen[key] = position
    loopback = [h for h in hosts if is_loopback(h)]
    if loopback and len(loopback) != len(hosts):
        raise ConfigError(
            f"{where}: {loopback[0]!r} cannot be mixed with other hosts: the other nodes would reach their "
            "own loopback, not this machine. Hint: use this node's network name or address."
        )
    return hosts
