"""This node's MPI stack, one home: the MPI library mpi4py loads, the launcher that belongs to it, and
whether the launcher that started this process is one that library can hear.

An MPI library only understands the process manager of its own kind: MPICH (the ``mpich`` wheel of
``tfdist[mpi]``) speaks PMI-1/2 (Hydra's ``mpiexec``, ``srun --mpi=pmi2``), Debian's Open MPI speaks PMIx
(its ``mpirun``, ``srun --mpi=pmix``). Started by the other kind, MPICH aborts in ``MPI_Init`` ("unsupported
PMI version PMIx") and Open MPI runs every rank alone (size 1). So:

- :func:`read_library` finds the library without ``MPI_Init``: mpi4py's extension is located (the binary
  wheel's loader picks its library then) and loaded with ``ctypes``, its ``libmpi`` read from the process's
  memory map, and ``MPI_Get_library_version`` (callable before ``MPI_Init``) names it. In a rank it runs
  in-process (the library is loaded anyway); the launcher asks the workers' Python in a subprocess
  (:func:`probe`, ``python -m tfdist.nodes.mpi``) and never loads an MPI library itself.
- :func:`find_stack` picks the launcher of that library (:func:`launcher_candidates`), checked by its
  ``--version``: ``tfdist launch --backend mpi|horovod`` and ``tfdist env`` use it.
- :func:`started_by` reads which launcher started a rank from the variables it set; :func:`mismatch` (pure)
  says when the library cannot hear it, and :func:`alone` when every rank ran alone after all.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import Any

#: The libraries' names as users know them.
FAMILY_NAMES = {"mpich": "MPICH", "openmpi": "Open MPI"}
#: The launcher of each family, as :func:`launcher_flavour` names it.
FLAVOUR_OF = {"mpich": "hydra", "openmpi": "openmpi"}
LAUNCHER_NAMES = {"hydra": "MPICH's Hydra (mpiexec)", "openmpi": "Open MPI's mpirun"}
#: Each family's launcher files: (the plain names, the names only that family uses).
LAUNCHER_FILES = {
    "mpich": (("mpiexec", "mpirun"), ("mpiexec.hydra", "mpiexec.mpich", "mpirun.mpich")),
    "openmpi": (("mpirun", "mpiexec"), ("mpirun.openmpi", "orterun", "prterun")),
}
#: How to use a site's MPI (built mpi4py against it): one page of the docs.
GUIDE = "docs/guides/mpi.md"
PROBE_TIMEOUT_S = 30.0
VERSION_TIMEOUT_S = 20.0


@dataclass(frozen=True)
class MPILibrary:
    """The MPI library mpi4py loads here."""

    family: str  # mpich | openmpi | other
    version: str  # the first line of MPI_Get_library_version
    path: str  # the shared library loaded
    pmix: bool = False  # speaks PMIx: Open MPI always, MPICH when built with it (libpmix loaded)
    #: speaks PMI-1/2 (Hydra, srun --mpi=pmi2): MPICH always, Open MPI 4 only with its s1/s2 components
    pmi: bool = True

    @property
    def name(self) -> str:
        """``MPICH 4.3.0`` / ``Open MPI 4.1.4`` / the version line of another library.

        Input/Output: ``"Open MPI v4.1.4, package: Debian OpenMPI, ..."`` -> ``"Open MPI 4.1.4"``.
        """
        number = re.search(r"\d+(\.\d+)+\w*", self.version)
        if self.family in FAMILY_NAMES and number:
            return f"{FAMILY_NAMES[self.family]} {number.group(0)}"
        return self.version.split(",")[0].strip() or "an unknown MPI library"

    def describe(self) -> str:
        """``MPICH 4.3.0 (/venv/lib/libmpi.so.12)``."""
        return f"{self.name} ({self.path})"


@dataclass(frozen=True)
class StartedBy:
    """The process manager that started this process, read from the variables it set."""

    kind: str  # openmpi | pmix | hydra | pmi2
    name: str  # how a user knows it: "Open MPI's mpirun"
    evidence: str  # the variable that says so: "OMPI_COMM_WORLD_SIZE=2"
    size: int | None  # the ranks it started, when it says
    speaks: str  # pmix | pmi


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


def _number(environ: Mapping[str, str], *names: str) -> int | None:
    for name in names:
        raw = environ.get(name, "")
        if raw.isdigit():
            return int(raw)
    return None


def launcher_rank(environ: Mapping[str, str]) -> int | None:
    """This process's rank as its launcher numbered it (MPI's or srun's variables; None: not started by one).

    Input/Output: ``{"PMI_RANK": "3"}`` -> ``3``; ``{"SLURM_PROCID": "1"}`` -> ``1``; ``{}`` -> ``None``.
    """
    return _number(environ, "PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "SLURM_PROCID")


def started_by(environ: Mapping[str, str]) -> StartedBy | None:
    """Which kind of launcher started this process (None: none, or one no MPI library hears).

    Input/Output: ``{"OMPI_COMM_WORLD_SIZE": "2", "PMIX_RANK": "0"}`` -> ``StartedBy("openmpi", "Open
    MPI's mpirun", "OMPI_COMM_WORLD_SIZE=2", 2, "pmix")``; ``{"PMI_RANK": "1", "PMI_SIZE": "2", "PMI_FD":
    "9"}`` -> ``StartedBy("hydra", "MPICH's Hydra (mpiexec)", "PMI_SIZE=2", 2, "pmi")``.
    """
    slurm = "SLURM_STEP_ID" in environ
    pmi = any(v in environ for v in ("PMI_FD", "PMI_PORT", "PMI_RANK"))
    if "OMPI_COMM_WORLD_SIZE" in environ:
        size = _number(environ, "OMPI_COMM_WORLD_SIZE")
        return StartedBy("openmpi", LAUNCHER_NAMES["openmpi"], f"OMPI_COMM_WORLD_SIZE={size}", size, "pmix")
    pmix_var = next((v for v in ("PMIX_RANK", "PMIX_NAMESPACE") if v in environ), None)
    if pmix_var and not pmi:
        name = "srun --mpi=pmix" if slurm else "a PMIx launcher (prterun, Open MPI 5's mpirun)"
        return StartedBy("pmix", name, *_evidence(environ, pmix_var, "PMIX_SIZE"), "pmix")
    if pmi and not pmix_var:
        var = next(v for v in ("PMI_RANK", "PMI_FD", "PMI_PORT") if v in environ)
        if slurm:
            return StartedBy("pmi2", "srun --mpi=pmi2", *_evidence(environ, var, "PMI_SIZE"), "pmi")
        return StartedBy("hydra", LAUNCHER_NAMES["hydra"], *_evidence(environ, var, "PMI_SIZE"), "pmi")
    return None


def _evidence(environ: Mapping[str, str], var: str, size_var: str) -> tuple[str, int | None]:
    """The variable that names the launcher (its size variable when set) and the ranks it started."""
    for name in (size_var, "SLURM_STEP_NUM_TASKS"):
        size = _number(environ, name)
        if size is not None:
            return f"{name}={size}", size
    return f"{var}={environ[var]}", None


def _fix(library: MPILibrary, by: StartedBy, launcher: str | None) -> str:
    own = launcher or ("mpiexec of the mpich wheel" if library.family == "mpich" else "Open MPI's mpirun")
    if library.family == "mpich" and by.kind == "pmix" and "srun" in by.name:
        return f"srun --mpi=pmi2 (MPICH's PMI), or mpi4py built against the site's MPI ({GUIDE})"
    if library.family == "openmpi" and by.kind == "pmi2":
        return f"srun --mpi=pmix (Open MPI's PMIx), or the mpich wheel's mpi4py for pmi2 ({GUIDE})"
    if library.family == "mpich":
        return (
            f"start it with {own} (or tfdist launch --backend mpi, which picks it), or build mpi4py against "
            f"the site's Open MPI in its own venv ({GUIDE})"
        )
    return (
        f"start it with {own} (or tfdist launch --backend mpi, which picks it), or use the mpich wheel's "
        f"mpi4py with Hydra: pip install 'tfdist[mpi]' in another venv ({GUIDE})"
    )


def mismatch(library: MPILibrary | None, by: StartedBy | None, launcher: str | None = None) -> str | None:
    """The one line for a library started by a launcher it cannot hear (None when it can, or unknown).

    ``launcher``: the library's own launcher, named in the fix when known. Only the pairs that cannot work
    are named: MPICH without PMIx under a PMIx launcher (it aborts in MPI_Init), Open MPI without PMI-1/2
    components under Hydra or ``srun --mpi=pmi2`` (measured with Debian's 4.1: every rank alone under
    Hydra, "OMPI was not built with SLURM's PMI support" under srun). Others are left to :func:`alone`.
    """
    if library is None or by is None:
        return None
    cannot = (library.family == "mpich" and not library.pmix and by.speaks == "pmix") or (
        library.family == "openmpi" and not library.pmi and by.speaks == "pmi"
    )
    if not cannot:
        return None
    what = "aborts in MPI_Init" if library.family == "mpich" else "fails in MPI_Init or runs every rank alone"
    return (
        f"mpi4py here uses {library.describe()} but this process was started by {by.name} "
        f"({by.evidence}), which that library cannot hear: MPI {what}. Hint: {_fix(library, by, launcher)}."
    )


def alone(
    library: MPILibrary | None, by: StartedBy | None, size: int, launcher: str | None = None
) -> str | None:
    """The one line for ranks that each see a world of ``size`` 1 while their launcher started several."""
    if by is None or size != 1 or not by.size or by.size < 2:
        return None
    used = library.describe() if library is not None else "mpi4py's MPI library"
    fix = _fix(library, by, launcher) if library is not None else f"build mpi4py against that MPI ({GUIDE})"
    return (
        f"MPI sees 1 rank in this process but {by.name} started {by.size} ({by.evidence}): {used}, which "
        f"mpi4py uses, did not join that launcher's job. Hint: {fix}."
    )


# --- The library (no MPI_Init) ---------------------------------------------------------------------------


def _mapped(name_start: Sequence[str]) -> list[str]:
    """Shared libraries of this process whose file name starts with one of ``name_start``."""
    try:
        with open("/proc/self/maps") as fh:
            paths = {line.split(None, 5)[-1].strip() for line in fh if "/" in line}
    except OSError:
        return []
    return sorted(p for p in paths if os.path.basename(p).startswith(tuple(name_start)))


def read_library() -> MPILibrary | None:
    """The MPI library mpi4py loads in this process, without ``MPI_Init`` (None without mpi4py).

    Loads it (``ctypes``), as importing ``mpi4py.MPI`` would: call it in a rank, or in a subprocess
    (:func:`probe`). RuntimeError when mpi4py finds no MPI library at all.
    """
    import ctypes
    import importlib.util

    try:
        # The binary wheel's finder picks (and loads) its library here; a source build names its extension.
        spec = importlib.util.find_spec("mpi4py.MPI")
    except ImportError:
        return None
    if spec is None or not spec.origin:
        return None
    mode = os.RTLD_LAZY | os.RTLD_LOCAL
    ctypes.CDLL(spec.origin, mode)  # its libmpi comes with it; Python's import finds it loaded later
    candidates = _mapped(("libmpi.so", "libmpi_abi.so", "libmpich.so", "libmpi_"))
    if not candidates:
        raise RuntimeError(f"mpi4py's extension {spec.origin} loaded no libmpi")
    path = candidates[0]
    lib = ctypes.CDLL(path, mode)
    buf, length = ctypes.create_string_buffer(8192), ctypes.c_int(0)
    version = ""
    if lib.MPI_Get_library_version(buf, ctypes.byref(length)) == 0:  # allowed before MPI_Init (MPI 3.0)
        version = buf.value.decode(errors="replace").strip().splitlines()[0].strip()
    if hasattr(lib, "ompi_mpi_comm_self"):
        family = "openmpi"
    elif version.startswith("MPICH"):
        family = "mpich"
    else:
        family = "other"
    pmix = family == "openmpi" or bool(_mapped(("libpmix.so",)))
    real = os.path.realpath(path)
    return MPILibrary(family, version, real, pmix, family != "openmpi" or _openmpi_has_pmi(real))


def _openmpi_has_pmi(library: str) -> bool:
    """Whether this Open MPI has its PMI-1/2 components (``--with-pmi``: mca_pmix_s1/s2, Open MPI 4 only),
    looked for in its component directories beside the library (``lib/openmpi*/``)."""
    import glob

    libdir = os.path.dirname(library)
    found = glob.glob(os.path.join(libdir, "openmpi*", "mca_pmix_s[12].so"))
    found += glob.glob(os.path.join(libdir, "openmpi", "lib", "openmpi*", "mca_pmix_s[12].so"))  # Debian
    return bool(found)


def probe(python: str) -> MPILibrary | None:
    """:func:`read_library` in ``python`` (the workers' interpreter), in a subprocess: the caller never
    loads an MPI library. RuntimeError with the reason when it cannot be read."""
    try:
        proc = subprocess.run(
            [python, "-m", "tfdist.nodes.mpi"],
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise RuntimeError(f"{python} could not be asked for its MPI library: {exc}") from None
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"{python} could not read its MPI library: {tail}")
    found = json.loads(lines[-1])
    return MPILibrary(**found) if found else None


# --- The launcher ----------------------------------------------------------------------------------------


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


def guess_launcher(library: MPILibrary, python: str) -> str | None:
    """The first of :func:`launcher_candidates` that exists (not asked its version): for naming the fix."""
    for candidate in launcher_candidates(library, python):
        found = candidate if os.path.isabs(candidate) else shutil.which(candidate)
        if found and os.access(found, os.X_OK):
            return found
    return None


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
    for candidate in launcher_candidates(library, python):
        found = candidate if os.path.isabs(candidate) else shutil.which(candidate, path=path)
        if not found or not os.access(found, os.X_OK) or found in looked:
            continue
        looked.append(found)
        flavour, version = launcher_flavour(found)
        if want is None or flavour == want:
            return MPIStack(library, found, flavour, version)
    wanted = LAUNCHER_NAMES.get(want or "", "an MPI launcher")
    seen = f" (looked at {', '.join(looked)})" if looked else ""
    return MPIStack(library, problem=f"mpi4py uses {library.describe()} and {wanted} was not found{seen}")


def _main() -> None:
    found = read_library()
    print(json.dumps(asdict(found) if found is not None else None))


if __name__ == "__main__":
    _main()
