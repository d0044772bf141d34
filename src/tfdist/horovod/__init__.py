"""Horovod's API (``import tfdist.horovod.tensorflow[.keras] as hvd``) on tfdist's MPI backend, for Keras 3
and TensorFlow releases Horovod itself no longer builds for; :mod:`.shim` answers ``import horovod``."""

from tfdist.mpi.rank import check_launcher

# A rank started by another MPI's launcher than mpi4py's stops here, with one line, before MPI_Init aborts.
check_launcher()
