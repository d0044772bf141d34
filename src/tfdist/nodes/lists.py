"""Node and host lists, pure: Slurm's compressed lists (expanded without ``scontrol``: every task derives
the cluster spec from its environment alone), ``--hosts`` / ``--hostfile`` / ``-H HOST:SLOTS`` and their
checks, ``HOST:PORT`` addresses, port ranges and node ranges."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass

from tfdist.errors import ConfigError

_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")
_COUNT = re.compile(r"^(\d+)(?:\(x(\d+)\))?$")
_NODE_RANGE = re.compile(r"^\s*(\d+)\s*(?:[:-]\s*(\d+)\s*)?$")
#: Guard against lists like n[0-99999999] that would exhaust memory rather than describe a real job.
MAX_HOSTS = 100_000


def _expand_ranges(body: str, source: str, whole: str) -> list[str]:
    """Expand ``01-03,7`` to ``["01", "02", "03", "7"]`` keeping the zero padding of each range."""
    values: list[str] = []
    for item in body.split(","):
        match = _RANGE.match(item.strip())
        if not match:
            raise ConfigError(
                f"{source}={whole!r}: {item!r} inside brackets is not a number or a range like 01-04."
            )
        lo_text, hi_text = match.group(1), match.group(2) or match.group(1)
        lo, hi = int(lo_text), int(hi_text)
        if hi < lo:
            raise ConfigError(f"{source}={whole!r}: range {item!r} runs backwards.")
        if hi - lo + 1 > MAX_HOSTS:
            raise ConfigError(f"{source}={whole!r}: range {item!r} names more than {MAX_HOSTS} hosts.")
        values.extend(str(n).zfill(len(lo_text)) for n in range(lo, hi + 1))
    return values


def expand_nodelist(text: str, source: str = "SLURM_STEP_NODELIST") -> list[str]:
    """Expand a Slurm node list.

    Input/Output: ``"n[01-03,7],m5"`` -> ``["n01", "n02", "n03", "n7", "m5"]``;
    ``"a[1-2]b[3-4]"`` -> ``["a1b3", "a1b4", "a2b3", "a2b4"]``.
    """
    if not text or not text.strip():
        raise ConfigError(f"{source} is empty. Hint: run inside an srun step, or set TF_CONFIG yourself.")
    text, depth = text.strip(), 0
    for ch in text:
        depth += (ch == "[") - (ch == "]")
        if depth > 1:
            raise ConfigError(f"{source}={text!r} has nested brackets; Slurm node lists never nest them.")
        if depth < 0:
            raise ConfigError(f"{source}={text!r} has a ']' without '['.")
    if depth:
        raise ConfigError(f"{source}={text!r} has an unclosed '['.")
    hosts: list[str] = []
    for part in re.split(r",(?![^\[]*\])", text):  # the commas outside brackets
        if not part or part.startswith("["):
            raise ConfigError(
                f"{source}={text!r} has an empty host name. Hint: expected e.g. node[01-04],gpu7."
            )
        if any(c.isspace() for c in part):
            raise ConfigError(f"{source}={text!r} contains white space inside a host name.")
        expanded = [""]
        for piece in re.split(r"(\[[^\]]*\])", part):
            values = _expand_ranges(piece[1:-1], source, text) if piece.startswith("[") else [piece]
            # Checked before the product is built: a[1-99999]b[1-99999] would fill the memory first.
            if len(expanded) * len(values) > MAX_HOSTS:
                raise ConfigError(f"{source}={text!r} names more than {MAX_HOSTS} hosts.")
            expanded = [h + v for h in expanded for v in values]
        hosts.extend(expanded)
        if len(hosts) > MAX_HOSTS:
            raise ConfigError(f"{source}={text!r} names more than {MAX_HOSTS} hosts.")
    return hosts


def expand_tasks_per_node(text: str, source: str = "SLURM_STEP_TASKS_PER_NODE") -> list[int]:
    """Expand Slurm's task counts per node.

    Input/Output: ``"2(x3),1"`` -> ``[2, 2, 2, 1]``; ``"4"`` -> ``[4]``.
    """
    counts: list[int] = []
    for item in (text or "").split(","):
        match = _COUNT.match(item.strip())
        if not match:
            raise ConfigError(f"{source}={text!r}: {item!r} is not a count like 2 or 2(x3).")
        count, repeat = int(match.group(1)), int(match.group(2) or 1)
        if count < 1 or repeat < 1:
            raise ConfigError(f"{source}={text!r}: counts and repeats must be at least 1.")
        if repeat > MAX_HOSTS:
            raise ConfigError(f"{source}={text!r}: repeat {repeat} exceeds {MAX_HOSTS} nodes.")
        counts.extend([count] * repeat)
        if len(counts) > MAX_HOSTS:
            raise ConfigError(f"{source}={text!r} counts more than {MAX_HOSTS} nodes.")
    return counts


@dataclass(frozen=True)
class NodeRange:
    """The fewest and the most nodes of a job (equal: a fixed count)."""

    low: int
    high: int

    @property
    def elastic(self) -> bool:
        """Whether the job may run on fewer nodes than the most."""
        return self.low < self.high


def parse_node_range(text: str, where: str, sep: str = ":") -> NodeRange:
    """``N``, ``MIN:MAX`` (torchrun's form) or ``MIN-MAX`` (sbatch's): ``tfdist launch --nnodes`` and
    ``tfdist slurm --nodes`` take either; ConfigError naming ``where``, its hint written with ``sep``.

    Input/Output: ``"2:4"`` and ``"2-4"`` -> ``NodeRange(2, 4)``; ``"3"`` -> ``NodeRange(3, 3)``.
    """
    match = _NODE_RANGE.match(text)
    if not match:
        raise ConfigError(
            f"{where}={text!r} must be a number of nodes N or a range MIN{sep}MAX, e.g. 2{sep}3."
        )
    low = int(match.group(1))
    high = low if match.group(2) is None else int(match.group(2))
    if low < 1:
        raise ConfigError(
            f"{where}={f'{text}: MIN={low}' if match.group(2) else low} must be at least 1 node."
        )
    if low > high:
        raise ConfigError(
            f"{where}={text}: MIN={low} is above MAX={high}. Hint: write {high}{sep}{low} (fewest{sep}most)."
        )
    return NodeRange(low, high)


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


MAX_PORT = 65535  # the highest TCP port


def split_address(address: str) -> tuple[str, str]:
    """``HOST:PORT`` split at its last colon, unchecked: ``"[::1]:80"`` -> ``("[::1]", "80")``; no colon:
    ``("", address)``."""
    host, _, port = address.rpartition(":")
    return host, port


def parse_address(address: object, where: str, hint: str = "e.g. node1:2222") -> tuple[str, int]:
    """``HOST:PORT`` checked (an IPv6 host in brackets, kept; a port 1-65535), else ConfigError naming
    ``where`` with ``hint``: ``"[::1]:80"`` -> ``("[::1]", 80)``."""
    host, port = split_address(address) if isinstance(address, str) else ("", "")
    bare_ipv6 = ":" in host and not (host.startswith("[") and host.endswith("]"))
    if not host or bare_ipv6 or not port.isdigit() or not 1 <= int(port) <= MAX_PORT:
        raise ConfigError(
            f"{where}={address!r} must be HOST:PORT (a port 1-{MAX_PORT}, an IPv6 host in brackets). "
            f"Hint: {hint}."
        )
    return host, int(port)


def check_ports(base: int, count: int, what: str, per: str = "tasks per node") -> int:
    """``base`` when ports ``base`` .. ``base + count - 1`` all exist, else ConfigError naming ``what``."""
    if not 1 <= base <= MAX_PORT:
        raise ConfigError(f"{what} is not a port (1-{MAX_PORT}).")
    if base + count - 1 > MAX_PORT:
        raise ConfigError(f"{what} with {count} {per} passes port {MAX_PORT}.")
    return base


def loopback_among_remote(hosts: Iterable[str]) -> list[str]:
    """The loopback entries of ``hosts`` when some other entry is not (remote nodes cannot reach them),
    else ``[]``: ``["localhost", "n2"]`` -> ``["localhost"]``; ``["127.0.0.1", "localhost"]`` -> ``[]``."""
    given = list(hosts)
    loopback = [h for h in given if is_loopback(h)]
    return loopback if len(loopback) != len(given) else []


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
    loopback = loopback_among_remote(hosts)
    if loopback:
        raise ConfigError(
            f"{where}: {loopback[0]!r} cannot be mixed with other hosts: the other nodes would reach their "
            "own loopback, not this machine. Hint: use this node's network name or address."
        )
    return hosts


def parse_hosts(text: str) -> tuple[str, ...]:
    """A comma list of node addresses (``--hosts``), each stripped, checked by :func:`check_hosts`:
    ``"n1, n2"`` -> ``("n1", "n2")``; ``"n1,,n2"`` -> ``("n1", "", "n2")``."""
    return tuple(h.strip() for h in text.split(","))


def read_hostfile(path: str) -> tuple[str, ...]:
    """The nodes of a host file (``--hostfile``): each line's first word (an MPI host file's ``slots=4``
    is ignored), ``#`` comments and blank lines skipped."""
    try:
        with open(path, encoding="utf-8") as fh:
            lines = [line.split("#")[0].strip() for line in fh]
    except OSError as exc:
        raise ConfigError(f"--hostfile {path!r} cannot be read: {exc.strerror}.") from None
    hosts = tuple(line.split()[0] for line in lines if line)
    if not hosts:
        raise ConfigError(f"--hostfile {path!r} lists no hosts.")
    return hosts


@dataclass(frozen=True)
class HostSlots:
    """One ``-H`` entry: a host and its workers (ranks)."""

    name: str
    slots: int


def parse_host_slots(text: str) -> tuple[HostSlots, ...]:
    """``"n1:4,n2:4"`` (``-H``) -> hosts with their slots (``n1`` alone means 1 slot), checked."""
    hosts: list[HostSlots] = []
    for part in text.split(","):
        name, _, slots = part.strip().partition(":")
        if not name:
            raise ConfigError(f"-H {text!r}: an empty host name. Hint: -H n1:4,n2:4.")
        try:
            count = int(slots) if slots else 1
        except ValueError:
            raise ConfigError(f"-H {text!r}: {part.strip()!r} has slots {slots!r}, not a number.") from None
        if count < 1:
            raise ConfigError(f"-H {text!r}: {name} has {count} slots; give at least 1.")
        hosts.append(HostSlots(name, count))
    seen: set[str] = set()
    for host in hosts:  # one pass: -H may name a thousand hosts
        if host.name in seen:
            raise ConfigError(
                f"-H {text!r}: host {host.name} is listed twice. Hint: one entry per host, HOST:SLOTS."
            )
        seen.add(host.name)
    if len({h.slots for h in hosts}) > 1:
        raise ConfigError(
            f"-H {text!r}: every host must run the same number of workers (tfdist runs -n per node); got "
            f"{', '.join(f'{h.name}:{h.slots}' for h in hosts)}."
        )
    return tuple(hosts)
