"""What the mpich wheel needs to start under Slurm's pmi2 plugin (pure: reads a mapping and metadata).

Both places an MPICH rank can begin use it: ``tfdist run`` sets the variable in the environment it
execs, and tfdist's own MPI import (:func:`tfdist.sync.mpi.import_mpi`, Horovod's ``hvd.init``) sets it
in the process before ``MPI_Init`` reads it, so a hand-written ``srun --mpi=pmi2 python train.py``
starts as reliably as ``srun tfdist run -- python train.py``.
"""

from __future__ import annotations

from collections.abc import Mapping

#: MPICH's variable that picks its network module (the mpich wheel has ucx and ofi).
NETMOD_VARIABLE = "MPIR_CVAR_CH4_NETMOD"


def pmi1_safe_netmod(environ: Mapping[str, str], mpich_wheel: bool) -> dict[str, str]:
    """``MPIR_CVAR_CH4_NETMOD=ofi`` for an MPICH-wheel rank started by ``srun --mpi=pmi2``, unless set.

    Why: Slurm's pmi2 plugin reads each PMI-1 request with one ``read`` of at most 1,024 bytes
    (``handle_pmi1_cmd``, "TODO: read until newline"), while the mpich wheel's PMI-1 client writes a
    segment of up to 1,024 value bytes plus its ``cmd=put kvsname=... key=...`` head. UCX's business card
    is hex with run-length zeros, 9 segments of 150-600 bytes measured, some runs longer: such a line is
    cut in two, Slurm logs "value not properly terminated in client request" and the peer's MPI_Init
    fails ("failed to unpack address") or waits forever. The ofi module's card is one 65-byte line, and
    a 4.8 MB all-reduce across two hosts takes the same time (4.4-5.0 ms ofi, 5.1-6.0 ms ucx).
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
