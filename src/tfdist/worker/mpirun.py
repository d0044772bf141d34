"""``python -m tfdist.worker.mpirun script.py …``: a rank under the MPI launcher, as ``python -m mpi4py``.

mpi4py's runner turns an uncaught exception or a non-zero exit of any rank into ``MPI_Abort``, so the
other ranks do not wait forever in a collective for a peer that has left. This runner does the same with
mpi4py's own functions and first records a non-zero ``sys.exit`` in the rank's error record: the MPI
launcher's own abort line (which names the rank) can be lost when it tears the job down (measured with
MPICH under load: 1 run in 12), and the launcher's report must still say which rank ended the job.
An uncaught exception is already recorded by :func:`tfdist.worker.errors.install`.
"""

from __future__ import annotations

import sys

from mpi4py.run import run_command_line, set_abort_status

from tfdist.worker.errors import record_exit


def main(argv: list[str] | None = None) -> None:
    """Run the script (or ``-m module`` / ``-c code``) of ``argv`` as mpi4py's runner does."""
    try:
        run_command_line(sys.argv[1:] if argv is None else argv)
    except SystemExit as exc:
        record_exit(exc)
        set_abort_status(exc)
        raise
    except KeyboardInterrupt as exc:
        set_abort_status(exc)
        raise
    except BaseException:
        # Abort now, after the traceback and the error record (the excepthook writes both), not at
        # MPI_Finalize: an exit handler registered after MPI (a library's thread pool, a peer-facing
        # shutdown) may wait for ranks that wait in a collective for this one, and the abort never came
        # (seen once in three runs: a rank's callback raised, the job waited until killed).
        sys.excepthook(*sys.exc_info())
        sys.stdout.flush()
        sys.stderr.flush()
        from mpi4py import MPI

        MPI.COMM_WORLD.Abort(1)


if __name__ == "__main__":
    main()
