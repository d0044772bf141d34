"""Slurm's compressed host and task-count lists, expanded without calling ``scontrol``.

Written by hand because nothing in the Python ecosystem parses them without a Slurm installation, and
tasks must agree on the cluster spec from their environment alone.
"""

from __future__ import annotations

import re

from tfdist.errors import ConfigError

_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")
_COUNT = re.compile(r"^(\d+)(?:\(x(\d+)\))?$")
#: Guard against lists like n[0-99999999] that would exhaust memory rather than describe a real job.
MAX_HOSTS = 100_000


def _split_top_level(text: str, source: str) -> list[str]:
    """Split on commas that are outside brackets."""
    parts: list[str] = []
    depth = 0
    current: list[str] = []
    for ch in text:
        if ch == "[":
            depth += 1
            if depth > 1:
                raise ConfigError(f"{source}={text!r} has nested brackets; Slurm node lists never nest them.")
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise ConfigError(f"{source}={text!r} has a ']' without '['.")
        if ch == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    if depth != 0:
        raise ConfigError(f"{source}={text!r} has an unclosed '['.")
    parts.append("".join(current))
    return parts


def _expand_ranges(body: str, source: str, whole: str) -> list[str]:
    """Expand ``01-03,7`` to ``["01", "02", "03", "7"]`` keeping the zero padding of each range."""
    values: list[str] = []
    for item in body.split(","):
        match = _RANGE.match(item.strip())
        if not match:
            raise ConfigError(
                f"{source}={whole!r}: {item!r} inside brackets is not a number or a range like 01-04."
            )
        lo_text, hi_text = match.group(1), match.group(2)
        if hi_text is None:
            values.append(lo_text)
            continue
        lo, hi = int(lo_text), int(hi_text)
        if hi < lo:
            raise ConfigError(f"{source}={whole!r}: range {item!r} runs backwards.")
        if hi - lo + 1 > MAX_HOSTS:
            raise ConfigError(f"{source}={whole!r}: range {item!r} names more than {MAX_HOSTS} hosts.")
        width = len(lo_text)
        values.extend(str(n).zfill(width) for n in range(lo, hi + 1))
    return values


def _expand_host(pattern: str, source: str, whole: str) -> list[str]:
    """Expand one host pattern that may hold several bracket groups (a[1-2]b[3-4] -> 4 hosts)."""
    hosts = [""]
    rest = pattern
    while rest:
        open_at = rest.find("[")
        if open_at < 0:
            hosts = [h + rest for h in hosts]
            break
        close_at = rest.find("]", open_at)
        prefix, body = rest[:open_at], rest[open_at + 1 : close_at]
        expanded = _expand_ranges(body, source, whole)
        hosts = [h + prefix + v for h in hosts for v in expanded]
        if len(hosts) > MAX_HOSTS:
            raise ConfigError(f"{source}={whole!r} names more than {MAX_HOSTS} hosts.")
        rest = rest[close_at + 1 :]
    return hosts


def expand_nodelist(text: str, source: str = "SLURM_STEP_NODELIST") -> list[str]:
    """Expand a Slurm node list.

    Input/Output: ``"n[01-03,7],m5"`` -> ``["n01", "n02", "n03", "n7", "m5"]``;
    ``"a[1-2]b[3-4]"`` -> ``["a1b3", "a1b4", "a2b3", "a2b4"]``.
    """
    if not text or not text.strip():
        raise ConfigError(f"{source} is empty. Hint: run inside an srun step, or set TF_CONFIG yourself.")
    hosts: list[str] = []
    for part in _split_top_level(text.strip(), source):
        if not part or part.startswith("["):
            raise ConfigError(
                f"{source}={text!r} has an empty host name. Hint: expected e.g. node[01-04],gpu7."
            )
        if any(c.isspace() for c in part):
            raise ConfigError(f"{source}={text!r} contains white space inside a host name.")
        hosts.extend(_expand_host(part, source, text))
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
    return counts
