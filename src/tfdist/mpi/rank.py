"""A rank's own start of MPI: ``mpi4py.MPI`` imported only after its launcher was checked against the
library (:mod:`tfdist.mpi.stack`), and the job's size checked once MPI runs."""

from __future__ import annotations

import os
import sys
from typing import Any

from tfdist import variables
from tfdist.backends import MPI_INSTALL_HINT
from tfdist.errors import ConfigError, SetupError
from tfdist.mpi.probe import guess_launcher, probe
from tfdist.mpi.stack import (
    MPILibrary,
    alone,
    has_mpich_wheel,
    launcher_rank,
    mismatch,
    pmi1_safe_netmod,
    started_by,
)


def import_mpi() -> Any:
    """``mpi4py.MPI``, or a SetupError saying how to install it.

    Importing ``mpi4py.MPI`` runs ``MPI_Init``, which reads MPICH's variables: the pmi2-safe network
    module is put in the environment first, for a rank that ``srun --mpi=pmi2`` started without ``tfdist
    run``. A launcher the library cannot hear ends the process first, with one line (:func:`check_launcher`),
    instead of MPI's abort or a job of lone ranks.
    """
    os.environ.update(pmi1_safe_netmod(os.environ, has_mpich_wheel()))
    if "mpi4py.MPI" not in sys.modules:
        check_launcher()
    try:
        from mpi4py import MPI
    except ImportError as exc:
        raise SetupError(
            f"the MPI backend needs mpi4py and an MPI library ({exc}). {MPI_INSTALL_HINT}"
        ) from None
    return MPI


def _library() -> tuple[MPILibrary | None, str | None]:
    """This Python's MPI library and its launcher; (None, None) when unreadable: MPI itself will say."""
    try:
        library = probe(sys.executable)
    except RuntimeError:
        return None, None
    return library, guess_launcher(library, sys.executable) if library else None


def stop(line: str) -> None:
    """End this rank on a wrong MPI stack: ConfigError under tfdist's worker (its hook prints the one line,
    records it for the launcher's report and exits 2); started by hand (``mpirun python train.py``), the
    same line from the launcher's first rank only (one line for the job, not one per rank) and exit code 2
    on every rank, without a traceback."""
    if variables.raw("TFDIST_ATTEMPT_DIR"):
        raise ConfigError(line)
    sys.stdout.flush()
    if launcher_rank(os.environ) in (None, 0):
        sys.stderr.write(f"ConfigError: {line}\n")
        sys.stderr.flush()
    raise SystemExit(2)


def check_launcher() -> None:
    """Before MPI_Init: the launcher that started this process (its variables) against the library mpi4py
    loads. Nothing is asked when no launcher started the process (one process alone)."""
    by = started_by(os.environ)
    if by is None:
        return
    library, launcher = _library()
    line = mismatch(library, by, launcher)
    if line is not None:
        stop(line)


def check_world(size: int) -> None:
    """Stops the rank when its launcher started several ranks and MPI sees one; ConfigError when the job's
    rank count differs from the count tfdist launched (``-n``)."""
    by = started_by(os.environ) if size == 1 else None
    if by is not None:
        library, launcher = _library()
        line = alone(library, by, size, launcher)
        if line is not None:
            stop(line)
    expected = variables.raw("TFDIST_WORLD_SIZE")
    if expected and int(expected) != size:
        raise ConfigError(
            f"the MPI job has {size} rank(s) but tfdist expected {expected} (TFDIST_WORLD_SIZE / -n). "
            f"Hint: start it with the same count, e.g. mpirun -np {expected}."
        )
