"""Horovod's API on tfdist: ``import tfdist.horovod.tensorflow as hvd`` (or ``.tensorflow.keras``).

The same names and semantics as ``horovod.tensorflow`` / ``horovod.tensorflow.keras``, on tfdist's MPI
backend (mpi4py, one packed shared-memory all-reduce per step): Horovod scripts run on TensorFlow 2.21 and
Keras 3, where Horovod itself no longer builds. ``tfdist launch --backend horovod`` runs scripts that
``import horovod`` unchanged (see :mod:`tfdist.horovod.shim`).
"""
