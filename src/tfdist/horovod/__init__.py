"""Horovod's API on tfdist: ``import tfdist.horovod.tensorflow as hvd`` (or ``.tensorflow.keras``).

The same names and semantics as ``horovod.tensorflow`` / ``horovod.tensorflow.keras``, on tfdist's MPI
backend (mpi4py, one packed shared-memory all-reduce per step): Horovod scripts run on TensorFlow 2.21 and
Keras 3, where Horovod itself no longer builds. ``tfdist launch --backend horovod`` runs scripts that
``import horovod`` unchanged (see :mod:`tfdist.horovod.shim`).
"""

from tfdist.mpi.rank import check_launcher

# A rank started by another MPI's launcher than its mpi4py's library stops here, with one line, before the
# script imports TensorFlow (seconds) and long before hvd.init() would abort inside MPI_Init.
check_launcher()
