"""tfdist's Horovod API in one process (size 1): Horovod's errors, what is refused and why, the wrappers'
arithmetic (gradient accumulation, predivide), the Keras 2 idioms of Horovod's examples, the import shim."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import numpy as np
import pytest


@pytest.fixture
def hvd() -> Iterator[object]:
    import tfdist.horovod.tensorflow.keras as hvd

    hvd.init()
    yield hvd
    hvd.shutdown()


def test_rank_before_init_is_horovods_value_error() -> None:
    import tfdist.horovod.tensorflow as hvd

    hvd.shutdown()
    with pytest.raises(ValueError, match=r"^Horovod has not been initialized; use hvd.init\(\)\.$"):
        hvd.rank()
    assert not hvd.is_initialized()


def test_one_process_is_a_job_of_size_one(hvd: object) -> None:
    import tensorflow as tf

    import tfdist.horovod.tensorflow as htf

    assert (htf.rank(), htf.size(), htf.local_rank(), htf.local_size(), htf.is_homogeneous()) == (
        0,
        1,
        0,
        1,
        True,
    )
    x = tf.constant([[1.0, 2.0], [3.0, 4.0]])
    assert np.array_equal(htf.allreduce(x), x.numpy())
    assert np.array_equal(htf.allreduce(x, op=htf.Sum, postscale_factor=2.0), 2 * x.numpy())
    assert np.array_equal(htf.allgather(x), x.numpy())
    assert np.array_equal(hvd.allreduce(np.array([1.0, 3.0])), [1.0, 3.0])  # the Keras flavour: NumPy


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda h: h.allreduce(np.ones(2, np.float32), op=h.Adasum), "Adasum is not supported"),
        (lambda h: h.SyncBatchNormalization(), "BatchNormalization(synchronized=True)"),
        (lambda h: h.add_process_set([0]), "add_process_set is not supported"),
        (lambda h: h.DistributedGradientTape(None, op=h.Sum, gradient_predivide_factor=2.0), "op != Average"),
    ],
)
def test_what_is_not_supported_says_so(hvd: object, call: object, message: str) -> None:
    import tfdist.horovod.tensorflow as htf

    with pytest.raises((NotImplementedError, ValueError)) as info:
        call(htf)  # type: ignore[operator]
    assert message in str(info.value)


def test_join_in_one_process_returns_its_own_rank(hvd: object) -> None:
    import tfdist.horovod.tensorflow as htf

    assert int(htf.join()) == 0  # the last rank to join: the only one


def test_distributed_optimizer_refuses_what_it_cannot_wrap(hvd: object) -> None:
    with pytest.raises(NotImplementedError, match="wraps Keras optimizers"):
        hvd.DistributedOptimizer(object())  # type: ignore[attr-defined]


def test_backward_passes_accumulate_then_apply_once(hvd: object) -> None:
    """Two passes of gradient g then one update with 2g (sum) or g (average), iterations counting both."""
    import keras
    import tensorflow as tf

    for average, expected in ((False, 1.0 - 0.1 * 2 * 3.0), (True, 1.0 - 0.1 * 3.0)):
        var = keras.Variable(np.ones(2, np.float32))
        opt = hvd.DistributedOptimizer(  # type: ignore[attr-defined]
            keras.optimizers.SGD(0.1), backward_passes_per_step=2, average_aggregated_gradients=average
        )
        grad = tf.constant([3.0, 3.0])
        opt.apply_gradients([(grad, var)])
        assert np.allclose(var.numpy(), 1.0)  # accumulated, not applied
        opt.apply_gradients([(grad, var)])
        assert np.allclose(var.numpy(), expected)
        assert int(opt.iterations.numpy()) == 2


def test_gradient_tape_keeps_structure_none_and_sparse(hvd: object) -> None:
    import tensorflow as tf

    import tfdist.horovod.tensorflow as htf

    table = tf.Variable(tf.ones([5, 2]))
    unused = tf.Variable(1.0)
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.gather(table, [1, 3]) * 2.0)
    tape = htf.DistributedGradientTape(tape, sparse_as_dense=True)
    grads = tape.gradient(loss, {"table": table, "unused": unused})
    assert grads["unused"] is None
    assert isinstance(grads["table"], tf.Tensor)  # densified
    assert np.array_equal(grads["table"].numpy()[[1, 3]], np.full((2, 2), 2.0))


def test_keras2_idioms_of_horovods_examples_work(hvd: object) -> None:
    import keras

    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    opt = hvd.DistributedOptimizer(keras.optimizers.Adam(0.01))  # type: ignore[attr-defined]
    model.compile(optimizer=opt, loss="mse", experimental_run_tf_function=False)
    model.fit(np.ones((8, 3), np.float32), np.ones((8, 1), np.float32), batch_size=4, verbose=0)
    assert opt.variables() == opt.variables  # tf.keras 2's method, Keras 3's property: both


def test_unknown_horovod_modules_are_named_under_the_shim() -> None:
    code = (
        "from tfdist.horovod import shim; shim.install()\n"
        "import horovod.tensorflow as a, tfdist.horovod.tensorflow as b; assert a is b\n"
        "import horovod.keras as k, tfdist.horovod.tensorflow.keras as k2; assert k is k2\n"
        "from horovod.tensorflow.keras import callbacks; assert callbacks.MetricAverageCallback\n"
        "assert b.__spec__.name == 'tfdist.horovod.tensorflow'\n"
        "import horovod.torch\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert "No module named 'horovod.torch': Horovod is not installed" in proc.stderr


def test_load_model_wraps_the_saved_optimizer_with_its_state(hvd: object, tmp_path: object) -> None:
    import keras

    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.Adam(0.01)), loss="mse")  # type: ignore[attr-defined]
    model.fit(np.ones((8, 3), np.float32), np.zeros((8, 2), np.float32), batch_size=4, epochs=2, verbose=0)
    path = str(tmp_path) + "/model.keras"  # type: ignore[operator]
    model.save(path)
    loaded = hvd.load_model(path)  # type: ignore[attr-defined]
    assert hasattr(type(loaded.optimizer), "_hvd_options")  # averaged gradients from here on
    assert isinstance(loaded.optimizer, keras.optimizers.Adam)
    assert int(loaded.optimizer.iterations.numpy()) == 4  # the saved state came back
    assert isinstance(keras.models.load_model(path).optimizer, keras.optimizers.Adam)  # plain Keras loads it
