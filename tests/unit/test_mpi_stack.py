"""MPI stacks (tfdist.mpi): which launcher started a rank (the variables each sets), the pairs of library
and launcher that cannot work, the library as mpi4py names it, the launcher chosen for it."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tfdist.mpi.probe import find_stack, launcher_candidates, parse_library
from tfdist.mpi.stack import MPILibrary, StartedBy, alone, mismatch, started_by

MPICH = MPILibrary("mpich", "MPICH Version:      5.0.2", "/v/lib/libmpi.so.12")
MPICH_PMIX = MPILibrary("mpich", "MPICH Version:      4.2.0", "/opt/mpich/lib/libmpi.so.12", pmix=True)
OPENMPI = MPILibrary(
    "openmpi",
    "Open MPI v4.1.4, package: Debian OpenMPI, ident: 4.1.4, repo rev: v4.1.4, May 26, 2022",
    "/usr/lib/x86_64-linux-gnu/openmpi/lib/libmpi.so.40.30.4",
    pmix=True,
    pmi=False,  # Debian's: PMIx only
)
OPENMPI_PMI = MPILibrary("openmpi", "Open MPI v4.1.6", "/opt/ompi/lib/libmpi.so.40", pmix=True, pmi=True)
INTEL = MPILibrary("other", "Intel(R) MPI Library 2021.10 for Linux* OS", "/opt/intel/lib/libmpi.so.12")

# What each launcher sets (measured: Open MPI 4.1.4's mpirun, the mpich wheel's Hydra; Slurm 22.05's
# pmix and pmi2 plugins as documented).
OPEN_MPI_RUN = {
    "OMPI_COMM_WORLD_SIZE": "2",
    "OMPI_COMM_WORLD_RANK": "1",
    "PMIX_RANK": "1",
    "PMIX_NAMESPACE": "756613121",
    "PMIX_SERVER_URI4": "756613120.0;tcp4://127.0.0.1:56045",
}
HYDRA = {"PMI_RANK": "1", "PMI_SIZE": "2", "PMI_FD": "9", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "2"}
SRUN_PMIX = {
    "SLURM_STEP_ID": "0",
    "SLURM_STEP_NUM_TASKS": "2",
    "PMIX_RANK": "0",
    "PMIX_NAMESPACE": "slurm.pmix.7.0",
}
SRUN_PMI2 = {
    "SLURM_STEP_ID": "0",
    "SLURM_STEP_NUM_TASKS": "2",
    "SLURM_MPI_TYPE": "pmi2",
    "PMI_FD": "5",
    "PMI_RANK": "0",
}
PRTERUN = {"PMIX_RANK": "0", "PMIX_NAMESPACE": "prterun-vm-1@1", "PMIX_SIZE": "4"}
SRUN_NO_MPI = {"SLURM_STEP_ID": "0", "SLURM_STEP_NUM_TASKS": "2", "SLURM_PROCID": "1"}


@pytest.mark.parametrize(
    ("environ", "kind", "evidence", "size", "speaks"),
    [
        (OPEN_MPI_RUN, "openmpi", "OMPI_COMM_WORLD_SIZE=2", 2, "pmix"),
        (HYDRA, "hydra", "PMI_SIZE=2", 2, "pmi"),
        ({"PMI_RANK": "0"}, "hydra", "PMI_RANK=0", None, "pmi"),
        (SRUN_PMIX, "pmix", "SLURM_STEP_NUM_TASKS=2", 2, "pmix"),
        (SRUN_PMI2, "pmi2", "SLURM_STEP_NUM_TASKS=2", 2, "pmi"),
        (PRTERUN, "pmix", "PMIX_SIZE=4", 4, "pmix"),
    ],
)
def test_the_launcher_is_read_from_the_variables_it_set(
    environ: dict[str, str], kind: str, evidence: str, size: int | None, speaks: str
) -> None:
    by = started_by(environ)
    assert by is not None
    assert (by.kind, by.evidence, by.size, by.speaks) == (kind, evidence, size, speaks)


@pytest.mark.parametrize("environ", [{}, SRUN_NO_MPI, {**HYDRA, "PMIX_RANK": "0"}])
def test_no_launcher_or_an_ambiguous_one_is_none(environ: dict[str, str]) -> None:
    assert started_by(environ) is None


@pytest.mark.parametrize(
    ("library", "environ", "expected"),
    [
        (MPICH, OPEN_MPI_RUN, "MPI aborts in MPI_Init"),  # the measured case: "unsupported PMI version PMIx"
        (MPICH, SRUN_PMIX, "srun --mpi=pmi2"),
        (MPICH, PRTERUN, "aborts"),
        (OPENMPI, HYDRA, "runs every rank alone"),
        (
            OPENMPI,
            SRUN_PMI2,
            "Hint: srun --mpi=pmix",
        ),  # measured: "OMPI was not built with SLURM's PMI support"
        (MPICH, HYDRA, None),
        (MPICH, SRUN_PMI2, None),
        (MPICH_PMIX, OPEN_MPI_RUN, None),  # an MPICH built with PMIx hears it
        (OPENMPI, OPEN_MPI_RUN, None),
        (OPENMPI, SRUN_PMIX, None),
        (OPENMPI_PMI, SRUN_PMI2, None),  # an Open MPI 4 built --with-pmi hears it
        (INTEL, OPEN_MPI_RUN, None),  # unknown libraries are not guessed at
        (MPICH, {}, None),
    ],
)
def test_pairs_that_cannot_work_are_named(
    library: MPILibrary, environ: dict[str, str], expected: str | None
) -> None:
    line = mismatch(library, started_by(environ), "/v/bin/mpiexec")
    if expected is None:
        assert line is None
        return
    assert line is not None and expected in line and "\n" not in line
    by = started_by(environ)
    assert by is not None
    assert library.describe() in line and by.name in line and "Hint:" in line


def test_the_mismatch_line_names_both_and_the_fix() -> None:
    line = mismatch(MPICH, started_by(OPEN_MPI_RUN), "/v/bin/mpiexec")
    assert line == (
        "mpi4py here uses MPICH 5.0.2 (/v/lib/libmpi.so.12) but this process was started by Open MPI's "
        "mpirun (OMPI_COMM_WORLD_SIZE=2), which that library cannot hear: MPI aborts in MPI_Init. Hint: "
        "start it with /v/bin/mpiexec (or tfdist launch --backend mpi, which picks it), or build mpi4py "
        "against the site's Open MPI in its own venv (docs/guides/mpi.md)."
    )


@pytest.mark.parametrize(
    ("by", "size", "named"),
    [
        (StartedBy("pmi2", "srun --mpi=pmi2", "SLURM_STEP_NUM_TASKS=2", 2, "pmi"), 1, True),
        (StartedBy("openmpi", "Open MPI's mpirun", "OMPI_COMM_WORLD_SIZE=1", 1, "pmix"), 1, False),
        (StartedBy("hydra", "MPICH's Hydra (mpiexec)", "PMI_RANK=0", None, "pmi"), 1, False),
        (StartedBy("hydra", "MPICH's Hydra (mpiexec)", "PMI_SIZE=2", 2, "pmi"), 2, False),
        (None, 1, False),
    ],
)
def test_ranks_alone_under_a_launcher_of_several(by: StartedBy | None, size: int, named: bool) -> None:
    line = alone(OPENMPI, by, size, "/usr/bin/mpirun.openmpi")
    assert (line is not None) == named
    if line is not None and by is not None:
        assert f"started {by.size} ({by.evidence})" in line and "Open MPI 4.1.4" in line


@pytest.mark.parametrize(
    ("library", "name"),
    [
        (MPICH, "MPICH 5.0.2"),
        (OPENMPI, "Open MPI 4.1.4"),
        (INTEL, "Intel(R) MPI Library 2021.10 for Linux* OS"),
    ],
)
def test_library_names(library: MPILibrary, name: str) -> None:
    assert library.name == name


@pytest.mark.parametrize(
    ("text", "family", "pmix"),
    [
        ("MPICH Version:      5.0.2\nMPICH configure:    --with-device=ch4:ucx,ofi\n", "mpich", False),
        ("MPICH Version:      4.2.0\nMPICH configure:    --with-pmix=/usr --with-pm=no\n", "mpich", True),
        ("MPICH Version:      4.2.0\nMPICH configure:    --with-pmi=pmix\n", "mpich", True),
        ("MPICH Version:      4.2.0\nMPICH configure:    --with-pmix=no\n", "mpich", False),
        ("Open MPI v4.1.4, package: Debian OpenMPI, ident: 4.1.4, repo rev: v4.1.4\n", "openmpi", True),
        ("Intel(R) MPI Library 2021.10 for Linux* OS\n", "other", False),
    ],
)
def test_the_library_is_what_mpi4py_says_of_it(text: str, family: str, pmix: bool) -> None:
    library = parse_library("/v/lib/libmpi.so", text)
    assert (library.family, library.version, library.pmix) == (family, text.splitlines()[0], pmix)
    assert library.pmi == (family != "openmpi")  # no PMI-1/2 components beside /v/lib


def test_launchers_are_looked_for_beside_the_library_then_by_the_family_s_names() -> None:
    assert launcher_candidates(MPICH, "/v/bin/python")[:3] == [
        "/v/bin/mpiexec",
        "/v/bin/mpirun",
        "/v/bin/mpiexec.hydra",
    ]
    openmpi = launcher_candidates(OPENMPI, "/o/bin/python")
    assert openmpi[0] == "/usr/lib/x86_64-linux-gnu/openmpi/bin/mpirun"
    # On PATH, Open MPI's own names before the plain mpirun (another MPI's there, through alternatives).
    assert openmpi.index("mpirun.openmpi") < openmpi.index("mpirun")
    assert launcher_candidates(None, "/p/bin/python") == [
        "/p/bin/mpiexec",
        "/p/bin/mpirun",
        "mpiexec",
        "mpirun",
    ]


needs_mpi4py = pytest.mark.skipif(importlib.util.find_spec("mpi4py") is None, reason="mpi4py not installed")


@needs_mpi4py
def test_this_venv_picks_the_launcher_of_the_mpich_wheel() -> None:
    """The project venv: the mpich wheel's MPICH, and its Hydra beside it (whatever `mpirun` PATH has)."""
    stack = find_stack(sys.executable)
    assert stack.library is not None and stack.library.family == "mpich", stack
    assert stack.flavour == "hydra" and stack.launcher == str(Path(sys.executable).parent / "mpiexec"), stack


@needs_mpi4py
@pytest.mark.parametrize("rank", ["0", "1"])
def test_a_rank_of_open_mpi_s_mpirun_stops_with_one_line_before_mpi_init(tmp_path: Path, rank: str) -> None:
    """Open MPI's variables by hand (no PMIx server): MPI_Init would abort; the check ends first, every rank
    with exit code 2, the line said by the launcher's first rank only (one line for the job)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI", "OMPI_", "TFDIST_", "SLURM_"))}
    proc = subprocess.run(
        [sys.executable, "-c", "from tfdist.mpi.rank import import_mpi; import_mpi(); print('initialised')"],
        env={**env, **OPEN_MPI_RUN, "OMPI_COMM_WORLD_RANK": rank, "PMIX_RANK": rank},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "initialised" not in proc.stdout
    lines = proc.stderr.strip().splitlines()
    if rank == "1":
        assert lines == [], proc.stderr
        return
    assert len(lines) == 1 and lines[0].startswith("ConfigError: mpi4py here uses MPICH"), proc.stderr
    assert "Open MPI's mpirun (OMPI_COMM_WORLD_SIZE=2)" in lines[0]
