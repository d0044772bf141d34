"""What this machine's MPI stack says of itself: the library mpi4py loads, the launcher that belongs to
it, and the MPI plugins srun offers.

Asked of the stacks themselves, in subprocesses: ``python -m mpi4py --mpi-library`` and
``--mpi-lib-version`` (neither starts MPI: the caller never loads an MPI library), the launcher's
``--version``, ``srun --mpi=list``.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import Any

from tfdist.backends import MPI_INSTALL_HINT
from tfdist.errors import SetupError
from tfdist.mpi.stack import LAUNCHER_NAMES, MPILibrary

#: The launcher of each family, as :func:`launcher_flavour` names it.
FLAVOUR_OF = {"mpich": "hydra", "openmpi": "openmpi"}
#: Each family's launcher files: (the plain names, the names only that family uses).
LAUNCHER_FILES = {
    "mpich": (("mpiexec", "mpirun"), ("mpiexec.hydra", "mpiexec.mpich", "mpirun.mpich")),
    "openmpi": (("mpirun", "mpiexec"), ("mpirun.openmpi", "orterun", "prterun")),
}
PROBE_TIMEOUT_S = 30.0
VERSION_TIMEOUT_S = 20.0


@dataclass(frozen=True)
class MPIStack:
    """What ``tfdist launch`` and ``tfdist env`` found: the library and the launcher chosen for it."""

    library: MPILibrary | None
    launcher: str | None = None
    flavour: str = "unknown"  # hydra | openmpi | unknown (the launcher's own --version)
    launcher_version: str = ""
    #: Why there is no library or launcher ("" when both were found).
    problem: str = ""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (``tfdist env --json``)."""
        out = asdict(self)
        if self.library is not None:
            out["library"]["name"] = self.library.name
        return out


def parse_library(path: str, text: str) -> MPILibrary:
    """The library from what mpi4py says of it: its path and ``MPI_Get_library_version``'s text.

    Input/Output: ``("/v/lib/libmpi.so.12", "MPICH Version:  5.0.2\\n...MPICH configure: --with-pm=hydra")``
    -> ``MPILibrary("mpich", "MPICH Version:  5.0.2", "/v/lib/libmpi.so.12")``.
    """
    text = text.replace("\0", "")  # Open MPI ends its text with a NUL
    version = text.strip().splitlines()[0].strip() if text.strip() else ""
    if version.startswith("Open MPI"):
        return MPILibrary("openmpi", version, path, True, _openmpi_has_pmi(path))
    family = "mpich" if version.startswith("MPICH") else "other"
    configured = next((line for line in text.splitlines() if "configure:" in line), "")
    pmix = bool(re.search(r"--with-pmix(?!=no)|--with-pmi=\S*pmix", configured))
    return MPILibrary(family, version, path, pmix)


def _openmpi_has_pmi(library: str) -> bool:
    """Whether this Open MPI has its PMI-1/2 components (``--with-pmi``: mca_pmix_s1/s2, Open MPI 4 only),
    looked for in its component directories beside the library (``lib/openmpi*/``)."""
    libdir = os.path.dirname(library)
    found = glob.glob(os.path.join(libdir, "openmpi*", "mca_pmix_s[12].so"))
    found += glob.glob(os.path.join(libdir, "openmpi", "lib", "openmpi*", "mca_pmix_s[12].so"))  # Debian
    return bool(found)


def _ask_mpi4py(python: str, option: str) -> str | None:
    """``python -m mpi4py OPTION``'s output (None without mpi4py); RuntimeError with the reason otherwise.
    The worker bootstrap stays out: this may run inside a rank."""
    try:
        proc = subprocess.run(
            [python, "-m", "mpi4py", option],
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
            env={**os.environ, "TFDIST_BOOTSTRAP": "0"},
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise RuntimeError(f"{python} could not be asked for its MPI library: {exc}") from None
    if "No module named mpi4py" in proc.stderr:
        return None
    if proc.returncode != 0 or not proc.stdout.strip():
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"{python} could not read its MPI library: {tail}")
    return proc.stdout


@lru_cache(maxsize=8)
def probe(python: str) -> MPILibrary | None:
    """The MPI library ``python``'s mpi4py loads (None without mpi4py), without ``MPI_Init``."""
    path = _ask_mpi4py(python, "--mpi-library")
    if path is None:
        return None
    return parse_library(os.path.realpath(path.strip()), _ask_mpi4py(python, "--mpi-lib-version") or "")


def launcher_flavour(path: str) -> tuple[str, str]:
    """(``hydra`` | ``openmpi`` | ``unknown``, its version line), from the launcher's ``--version``."""
    try:
        out = subprocess.run(
            [path, "--version"],
            capture_output=True,
            text=True,
            timeout=VERSION_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired):
        return "unknown", ""
    text = out.stdout + out.stderr
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if "HYDRA" in text:
        version = next((line for line in lines if line.startswith("Version:")), "")
        return "hydra", f"Hydra {version.split(':', 1)[-1].strip()}".strip()
    if "Open MPI" in text or "OpenRTE" in text or "Open RTE" in text:
        return "openmpi", lines[0] if lines else ""
    return "unknown", lines[0] if lines else ""


def launcher_candidates(library: MPILibrary | None, python: str) -> list[str]:
    """Where the launcher of ``library`` may be, best first: beside the library (``<prefix>/bin``: the mpich
    wheel's venv, an MPI built into its own prefix), beside ``python``, then by its names on PATH.

    Input/Output: ``MPILibrary("mpich", "", "/v/lib/libmpi.so.12")``, ``"/v/bin/python"`` ->
    ``["/v/bin/mpiexec", "/v/bin/mpirun", "/v/bin/mpiexec.hydra", ..., "mpiexec.hydra", ..., "mpirun"]``.
    """
    family = library.family if library is not None else "other"
    generic, own = LAUNCHER_FILES.get(family, (("mpiexec", "mpirun"), ()))
    dirs: list[str] = []
    if library is not None:
        dirs.append(os.path.join(os.path.dirname(os.path.dirname(library.path)), "bin"))
    dirs.append(os.path.dirname(python))
    out: list[str] = []
    for directory in dict.fromkeys(dirs):
        out += [os.path.join(directory, name) for name in (*generic, *own)]
    # On PATH the family's own names first: a plain mpirun there may be another MPI's (Debian's alternatives).
    return [*out, *own, *generic]


def existing_launchers(library: MPILibrary | None, python: str, path: str | None = None) -> list[str]:
    """The :func:`launcher_candidates` that exist and may run (``path``: PATH's value, default this
    process's), each once, best first."""
    candidates = launcher_candidates(library, python)
    found = [c if os.path.isabs(c) else shutil.which(c, path=path) for c in candidates]
    return list(dict.fromkeys(f for f in found if f and os.access(f, os.X_OK)))


def guess_launcher(library: MPILibrary, python: str) -> str | None:
    """The first launcher of ``library`` that exists (not asked its version): for naming the fix."""
    return next(iter(existing_launchers(library, python)), None)


def find_stack(python: str | None = None) -> MPIStack:
    """The library mpi4py loads for ``python`` and the launcher that belongs to it (cached per Python)."""
    return _find_stack(os.path.abspath(python or sys.executable), os.environ.get("PATH", ""))


@lru_cache(maxsize=8)
def _find_stack(python: str, path: str) -> MPIStack:
    try:
        library = probe(python)
    except RuntimeError as exc:
        return MPIStack(None, problem=str(exc))
    if library is None:
        return MPIStack(None, problem=f"mpi4py is not installed for {python}")
    want = FLAVOUR_OF.get(library.family)
    looked: list[str] = []
    for found in existing_launchers(library, python, path):
        looked.append(found)
        flavour, version = launcher_flavour(found)
        if want is None or flavour == want:
            return MPIStack(library, found, flavour, version)
    wanted = LAUNCHER_NAMES.get(want or "", "an MPI launcher")
    seen = f" (looked at {', '.join(looked)})" if looked else ""
    return MPIStack(library, problem=f"mpi4py uses {library.describe()} and {wanted} was not found{seen}")


def require_stack(python: str | None = None) -> MPIStack:
    """:func:`find_stack`, or SetupError: no mpi4py, no library, or no launcher of the library's kind
    (another MPI's launcher would start ranks that abort in MPI_Init or run alone)."""
    import importlib.util

    if python is None and importlib.util.find_spec("mpi4py") is None:
        raise SetupError(f"--backend mpi needs mpi4py, which is not installed. {MPI_INSTALL_HINT}")
    stack = find_stack(python)
    if stack.launcher is None:
        raise SetupError(f"--backend mpi: {stack.problem}. {MPI_INSTALL_HINT}")
    return stack


def mpi_ready() -> bool:
    """Whether mpi4py and the launcher of its MPI are here (:func:`require_stack` finds them)."""
    try:
        require_stack()
    except SetupError:
        return False
    return True


def srun_mpi_plugins(timeout_s: float = 20.0) -> tuple[str, ...] | None:
    """The plugins ``srun --mpi=list`` names here (None when srun is missing or does not answer: not a
    Slurm login node)."""
    if shutil.which("srun") is None:
        return None
    try:
        proc = subprocess.run(["srun", "--mpi=list"], capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return None
    if proc.returncode != 0:
        return None
    text = proc.stdout + proc.stderr
    return tuple(line.strip() for line in text.splitlines() if line.startswith(("\t", " ")) and line.strip())
