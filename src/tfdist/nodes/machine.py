"""This machine as a node: free ports, its GPUs, name lookups that do not hang, whether a name is this
machine. No TensorFlow (the launcher and ``tfdist run`` must start fast); every outside call is bounded.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from tfdist.errors import ConfigError
from tfdist.nodes.lists import is_loopback

#: Where the NVIDIA driver lists the node's GPUs (one entry each): the count when neither NVML nor
#: nvidia-smi is installed.
NVIDIA_GPUS_DIR = "/proc/driver/nvidia/gpus"
_T = TypeVar("_T")


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """``count`` distinct ports free on ``host`` now ("" = every interface): all bound at once, then
    released."""
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((host, 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def parse_gpu_list(value: str, source: str) -> tuple[str, ...]:
    """Parse a CUDA_VISIBLE_DEVICES-style list.

    Input/Output: ``"0,2"`` -> ``("0", "2")``; ``""`` -> ``()``; ``"GPU-1a2b,GPU-3c4d"`` -> the UUIDs.
    """
    text = value.strip()
    if not text or text in ("-1", "none", "NoDevFiles"):
        return ()
    items = tuple(part.strip() for part in text.split(","))
    if any(not item for item in items):
        raise ConfigError(f"{source}={value!r} has an empty entry. Hint: use a comma list such as 0,1.")
    return items


def gpu_count() -> int:
    """The NVIDIA GPUs of this node, counted the same way by every command (0 without a driver);
    CUDA_VISIBLE_DEVICES is not applied here (:func:`visible_gpus` does)."""
    return len(gpu_names())


def _nvml(read: Callable[[Any], _T]) -> _T | None:
    """``read(pynvml)`` between NVML's init and shutdown; None without the library, a driver or a device."""
    try:
        import pynvml  # nvidia-ml-py, installed with the gpu extra

        pynvml.nvmlInit()
    except Exception:  # no library or no driver
        return None
    try:
        return read(pynvml)
    except Exception:  # a driver that answers the count but not the device
        return None
    finally:
        pynvml.nvmlShutdown()


def _nvml_name(pynvml: Any, index: int) -> str:
    name = pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(index))
    return name.decode() if isinstance(name, bytes) else str(name)


def gpu_names() -> list[str]:
    """The model name of each NVIDIA GPU of this node, in the driver's order: NVML, else ``nvidia-smi -L``,
    else one ``"NVIDIA GPU"`` per entry of the driver's :data:`NVIDIA_GPUS_DIR`; [] without a driver. From
    the driver, not TensorFlow: the launcher must not import it, and ``tfdist env`` works without it."""
    names = _nvml(lambda nv: [_nvml_name(nv, i) for i in range(int(nv.nvmlDeviceGetCount()))])
    if names is not None:
        return names
    if shutil.which("nvidia-smi") is not None:
        try:
            out = subprocess.run(
                ["nvidia-smi", "-L"], capture_output=True, text=True, timeout=15, check=False
            )
        except (OSError, subprocess.TimeoutExpired):
            return []
        return smi_names(out.stdout)
    try:
        return ["NVIDIA GPU"] * len(os.listdir(NVIDIA_GPUS_DIR))
    except OSError:
        return []


def smi_names(listing: str) -> list[str]:
    """The GPU names of ``nvidia-smi -L``'s output (MIG lines under a GPU are not GPUs).

    Input/Output: ``"GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1a2b)\n  MIG 1g.10gb Device 0: ..."`` ->
    ``["NVIDIA H100 80GB HBM3"]``.
    """
    rows = [row.partition(": ")[2] for row in listing.splitlines() if row.startswith("GPU ")]
    return [row.split("(UUID:", 1)[0].strip() or "NVIDIA GPU" for row in rows]


def gpu_memory() -> tuple[str, int] | None:
    """(name, total bytes) of GPU 0 from nvidia-ml-py, or None without the library, a driver or a GPU."""

    def read(nv: Any) -> tuple[str, int] | None:
        if int(nv.nvmlDeviceGetCount()) < 1:
            return None
        return _nvml_name(nv, 0), int(nv.nvmlDeviceGetMemoryInfo(nv.nvmlDeviceGetHandleByIndex(0)).total)

    return _nvml(read)


def cuda_visible_devices(environ: Mapping[str, str]) -> tuple[str, ...] | None:
    """The GPUs ``CUDA_VISIBLE_DEVICES`` limits a process to; None when it is unset (every GPU)."""
    value = environ.get("CUDA_VISIBLE_DEVICES")
    return None if value is None else parse_gpu_list(value, "CUDA_VISIBLE_DEVICES")


def visible_gpus(environ: Mapping[str, str], count: int | None = None) -> list[str]:
    """GPU ids a process may use: CUDA_VISIBLE_DEVICES if set, else every GPU of the node (``count``, or
    :func:`gpu_count` when None)."""
    limited = cuda_visible_devices(environ)
    if limited is not None:
        return list(limited)
    return [str(i) for i in range(gpu_count() if count is None else count)]


def address_of(host: str) -> str | None:
    """The IPv4 address ``host`` resolves to here, else None."""
    try:
        return socket.gethostbyname(host)
    except (OSError, UnicodeError):
        return None


def host_name(address: str, timeout: float = 1.0) -> str | None:
    """The name ``address`` resolves back to, within ``timeout`` seconds (a slow resolver is not waited
    for), else None."""
    found: list[str] = []

    def look() -> None:
        try:
            found.append(socket.gethostbyaddr(address)[0])
        except (OSError, UnicodeError):
            pass

    thread = threading.Thread(target=look, daemon=True)
    thread.start()
    thread.join(timeout)
    return found[0] if found else None


def is_this_machine(name: str) -> bool:
    """Whether ``name`` is this machine (its host name, loopback, or one of its addresses)."""
    if name in ("localhost", socket.gethostname(), socket.getfqdn()):
        return True
    try:
        address = socket.gethostbyname(name)
        mine = {socket.gethostbyname(socket.gethostname())}
    except OSError:
        return False
    return is_loopback(address) or address in mine


def loopback_peers(
    own_host: str, hosts: Sequence[str], resolve: Callable[[str], str | None] = address_of
) -> list[tuple[str, str]]:
    """The OTHER nodes of ``hosts`` whose names resolve to a loopback address here (this node would dial
    itself), with that address. This node's own name at 127.0.1.1 (Debian's default) is harmless: peers
    resolve it with their own files; unresolvable names are skipped (TensorFlow names them clearly)."""
    return [
        (host, address)
        for host in dict.fromkeys(hosts)
        if host != own_host and (address := resolve(host)) is not None and is_loopback(address)
    ]
