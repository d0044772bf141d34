"""An MPI stack as described (pure): the library, the launcher that started a rank and whether that
library can hear it, each launcher's own options, and the mpich wheel's PMI quirk under Slurm.

An MPI library hears only a process manager of its own kind: MPICH (the ``mpich`` wheel) speaks PMI-1/2
(Hydra's ``mpiexec``, ``srun --mpi=pmi2``), Debian's Open MPI speaks PMIx (its ``mpirun``, ``srun
--mpi=pmix``). Started by the other kind, MPICH aborts in ``MPI_Init`` and Open MPI runs every rank alone:
:func:`mismatch` and :func:`alone` say so in one line instead.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

#: The libraries' names as users know them.
FAMILY_NAMES = {"mpich": "MPICH", "openmpi": "Open MPI"}
LAUNCHER_NAMES = {"hydra": "MPICH's Hydra (mpiexec)", "openmpi": "Open MPI's mpirun"}
#: How to use a site's MPI (built mpi4py against it): one page of the docs.
GUIDE = "docs/guides/mpi.md"
#: (family, rank, size, local rank, local size) variables each kind of launcher sets, in the order tried.
RANK_VARIABLES = (
    (
        "Open MPI",
        "OMPI_COMM_WORLD_RANK",
        "OMPI_COMM_WORLD_SIZE",
        "OMPI_COMM_WORLD_LOCAL_RANK",
        "OMPI_COMM_WORLD_LOCAL_SIZE",
    ),
    ("MPICH/Hydra", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"),
    ("PMIx", "PMIX_RANK", "PMIX_SIZE", "PMIX_LOCAL_RANK", "PMIX_LOCAL_SIZE"),
)
#: The rank variable of each kind, as a rank's error record and output are named by.
MPI_RANK = ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK")
#: srun's default ``--mpi`` plugin for the MPI backends. pmi2, not pmix: the mpich wheel's PMI client speaks
#: the PMI wire protocol over the PMI_FD socket that Slurm's pmi2 plugin opens (measured: 4 ranks on 2
#: nodes), while Slurm's pmix plugin needs libpmix on every node and an MPI built against PMIx.
SRUN_PLUGIN = "pmi2"
#: Every output line tagged with its rank by the MPI launcher itself (all ranks share one pipe to tfdist).
RANK_PREFIX = {"hydra": ("-prepend-rank",), "openmpi": ("--tag-output",)}
#: MPI libraries busy-poll while waiting, stealing the core of a neighbouring worker on a small machine.
#: Open MPI can be told to yield; MPICH has no such setting (measured: a rank waiting 1 s burns 1 s of CPU).
#: Users' own settings win.
YIELD_ENV = {"OMPI_MCA_mpi_yield_when_idle": "1"}
#: MPICH's variable that picks its network module (the mpich wheel has ucx and ofi).
NETMOD_VARIABLE = "MPIR_CVAR_CH4_NETMOD"


@dataclass(frozen=True)
class MPILibrary:
    """The MPI library mpi4py loads."""

    family: str  # mpich | openmpi | other
    version: str  # the first line of MPI_Get_library_version
    path: str  # the shared library loaded
    pmix: bool = False  # speaks PMIx: Open MPI always, MPICH when configured with it
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


def bind_args(flavour: str, sets: Sequence[tuple[int, ...]], nodes: int = 1) -> tuple[str, ...]:
    """The MPI launcher's own options binding this node's rank i to ``sets[i]`` (CPU numbers of the cores
    the launcher may use) in a job of ``nodes`` nodes.

    Hydra's ``core:N`` numbers the machine's cores, not the launcher's: a launcher kept to core 1 had its
    rank put on core 0. One node: Hydra gets the CPU numbers. Several: node 0's ``mpiexec`` binds every
    node's ranks with its own numbers, so a node's only rank keeps its node's CPU set (no option), and
    several per node take Hydra's cores (right on whole nodes and in cgroup CPU sets, which Hydra sees).

    Input/Output: ``("hydra", [(0, 1), (2, 3)])`` -> ``("-bind-to", "user:0+1,2+3")``; ``("hydra",
    [(1,)], 2)`` -> ``()``; ``("hydra", [(0,), (1,)], 2)`` -> ``("-bind-to", "core:1")``;
    ``("openmpi", [(0, 1)])`` -> ``("--map-by", "slot:PE=2", "--bind-to", "core")``.
    """
    if not sets:
        return ()
    if flavour == "hydra" and nodes == 1:
        return ("-bind-to", "user:" + ",".join("+".join(map(str, cpus)) for cpus in sets))
    if flavour == "hydra":
        return ("-bind-to", f"core:{len(sets[0])}") if len(sets) > 1 else ()
    if flavour == "openmpi":
        return ("--map-by", f"slot:PE={len(sets[0])}", "--bind-to", "core")
    return ()


def pmi1_safe_netmod(environ: Mapping[str, str], mpich_wheel: bool) -> dict[str, str]:
    """``MPIR_CVAR_CH4_NETMOD=ofi`` for an MPICH-wheel rank started by ``srun --mpi=pmi2``, unless set
    (by ``tfdist run`` in the environment it execs, by :func:`tfdist.mpi.rank.import_mpi` before
    ``MPI_Init``).

    Why: Slurm's pmi2 plugin reads each PMI-1 request with one ``read`` of at most 1,024 bytes, and UCX's
    address lines are longer: cut in two, the peer's MPI_Init fails or waits forever. The ofi module's
    address is one 65-byte line, as fast (docs/guides/slurm.md).
    """
    if not mpich_wheel or environ.get("SLURM_MPI_TYPE") != "pmi2" or "PMI_FD" not in environ:
        return {}
    if NETMOD_VARIABLE in environ or "MPICH_CH4_NETMOD" in environ:
        return {}  # the user's choice
    return {NETMOD_VARIABLE: "ofi"}


def has_mpich_wheel() -> bool:
    """Whether this Python has the mpich wheel (its metadata only: MPI itself is not loaded)."""
    from importlib import metadata

    try:
        metadata.version("mpich")
    except metadata.PackageNotFoundError:
        return False
    return True


@dataclass(frozen=True)
class StartedBy:
    """The process manager that started this process, read from the variables it set."""

    kind: str  # openmpi | pmix | hydra | pmi2
    name: str  # how a user knows it: "Open MPI's mpirun"
    evidence: str  # the variable that says so: "OMPI_COMM_WORLD_SIZE=2"
    size: int | None  # the ranks it started, when it says
    speaks: str  # pmix | pmi


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
    return _number(environ, *MPI_RANK, "SLURM_PROCID")


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
