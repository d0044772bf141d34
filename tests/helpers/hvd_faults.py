"""Faults in a Horovod-API job: ``mismatch`` (rank 1 all-reduces another shape) or ``die`` (rank 1 exits
while rank 0 waits in an all-reduce). Either must end the job with an error, never hang."""

import os
import sys

import tensorflow as tf

import tfdist.horovod.tensorflow as hvd

hvd.init()
if sys.argv[1] == "mismatch":
    hvd.allreduce(tf.zeros([3, 4 + hvd.rank()]))
elif sys.argv[1] == "die":
    hvd.allreduce(tf.ones([4]))  # everyone gets here
    if hvd.rank() == 1:
        os._exit(7)
    hvd.allreduce(tf.ones([4]))
print("unreachable: the collective returned", flush=True)
