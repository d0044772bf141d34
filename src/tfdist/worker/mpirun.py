"""``python -m tfdist.worker.mpirun script.py …``: a rank under the MPI launcher, as ``python -m mpi4py``.

An uncaught exception or a non-zero exit of any rank becomes ``MPI_Abort`` (no rank waits forever for a
peer that left), a non-zero ``sys.exit`` recorded first (the launcher's own abort line can be lost).
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
        # Abort now, after the traceback and the error record, not at MPI_Finalize: an exit handler
        # registered after MPI may wait for ranks that wait in a collective for this one.
        sys.excepthook(*sys.exc_info())
        sys.stdout.flush()
        sys.stderr.flush()
        from mpi4py import MPI

        MPI.COMM_WORLD.Abort(1)


if __name__ == "__main__":
    main()
