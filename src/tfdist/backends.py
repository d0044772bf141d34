"""The synchronisation backends, named once, and :func:`choose`, the one rule for which of them a job or
a process runs. Pure: no TensorFlow, no MPI import. Each name maps to one :mod:`tfdist.sync` synchroniser.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tfdist.errors import ConfigError


@dataclass(frozen=True)
class Backend:
    """One way of summing gradients across the job."""

    name: str
    #: Every process runs its own one-device strategy and the synchroniser sums across processes.
    process_level: bool
    summary: str
    #: How to install what it needs ("" when TensorFlow alone is enough).
    install_hint: str = ""
    #: Whether ``tfdist bench`` can measure it on this kind of machine.
    benchable: bool = True


MPI_INSTALL_HINT = (
    "Hint: pip install 'tfdist[mpi]' (mpi4py and the mpich wheel), or your system's MPI "
    "(apt-get install openmpi-bin libopenmpi-dev) plus pip install mpi4py."
)
HOROVOD_INSTALL_HINT = (
    "Hint: build Horovod against your TensorFlow (HOROVOD_WITH_TENSORFLOW=1 pip install horovod), "
    "or use --backend mpi: the same design through mpi4py, installed with pip install 'tfdist[mpi]'."
)

REGISTRY: dict[str, Backend] = {
    b.name: b
    for b in (
        Backend("tf", False, "TensorFlow's collectives inside the strategy (gRPC ring / NCCL)"),
        Backend(
            "mpi", True, "one packed all-reduce per step through mpi4py (+ shared memory)", MPI_INSTALL_HINT
        ),
        Backend("horovod", True, "Horovod's core all-reduce", HOROVOD_INSTALL_HINT, benchable=False),
    )
}
NAMES = tuple(REGISTRY)  # in the order the CLI lists them
PROCESS_BACKENDS = tuple(n for n, b in REGISTRY.items() if b.process_level)
BENCH_BACKENDS = tuple(n for n, b in REGISTRY.items() if b.benchable)
CHOICES = ("auto", *NAMES)  # what a user may ask for


@dataclass(frozen=True)
class BackendChoice:
    """The backend a job or a process runs, and why."""

    name: str
    #: One line saying why ``auto`` became ``name``; "" when there was nothing to choose.
    reason: str = ""
    #: ``horovod`` without Horovod installed: the MPI backend, ``import horovod`` giving tfdist's API.
    horovod_shim: bool = False


def check_name(requested: str, source: str) -> str:
    """``requested`` as a backend name (``auto`` included), or ConfigError naming where it came from.
    Input/Output: ``(" MPI", "--backend")`` -> ``"mpi"``."""
    name = requested.strip().lower()
    if name not in CHOICES:
        hint = " Hint: unset TFDIST_BACKEND or set it to one of those." if source == "TFDIST_BACKEND" else ""
        raise ConfigError(f"{source}={name!r} is not a backend; choose {', '.join(CHOICES)}.{hint}")
    return name


def choose(
    requested: str,
    *,
    source: str = "--backend",
    under_mpi: bool = False,
    own_strategy: bool = True,
    workers: int = 2,
    gpus: int = 0,
    mpi_ready: Callable[[], bool] = lambda: False,
    mpi_launcher: str = "an MPI launcher",
    horovod_installed: Callable[[], bool] = lambda: True,
) -> BackendChoice:
    """The one backend decision, for every front end; ``requested`` is ``auto`` or a name from ``source``.
    ``auto`` becomes: ``mpi`` under an MPI launcher; ``tf`` for a program that builds its own strategy,
    fewer than 2 ``workers`` or ``gpus``; on CPU ``mpi`` when ``mpi_ready()``, else ``tf``. ``horovod``
    without Horovod installed runs tfdist's Horovod API. Probes are asked only when they decide.

    Input/Output: ``choose("auto", under_mpi=True)`` -> ``BackendChoice("mpi", "started by an MPI
    launcher")``; ``choose("horovod", horovod_installed=lambda: False)`` -> ``BackendChoice("horovod", "",
    True)``.
    """
    name = check_name(requested, source)
    if name == "horovod":
        return BackendChoice(name, horovod_shim=not horovod_installed())
    if name != "auto":
        return BackendChoice(name)
    if under_mpi:
        return BackendChoice("mpi", "started by an MPI launcher")
    if own_strategy or workers < 2:
        return BackendChoice("tf")
    if gpus:
        return BackendChoice("tf", "GPUs visible: TensorFlow's collectives (NCCL)")
    if mpi_ready():
        return BackendChoice(
            "mpi",
            f"CPU only, mpi4py and {mpi_launcher} found: the MPI backend, faster than TensorFlow's "
            "collectives on CPU (--backend tf to choose those)",
        )
    return BackendChoice(
        "tf",
        f"CPU only, mpi4py or {mpi_launcher} missing: TensorFlow's collectives (pip install 'tfdist[mpi]' "
        "is faster)",
    )
