"""hvd.elastic's TensorFlow states in one process: Horovod's own ``test_elastic_state`` steps (commit,
restore) for variables and a Keras model, and a restarted attempt that loads the model and optimizer
variables rank 0 committed to disk."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest


@pytest.fixture
def hvd() -> Iterator[object]:
    import tfdist.horovod.tensorflow.keras as hvd

    hvd.init()
    yield hvd
    hvd.shutdown()


def test_tensorflow_state_commits_and_restores_variables(hvd: object) -> None:
    import tensorflow as tf

    import tfdist.horovod.tensorflow as htf

    v = tf.Variable([1.0, 1.0])
    state = htf.elastic.TensorFlowState([v], batch=20, epoch=10)
    state.sync()
    v.assign([3.0, 4.0])
    state.batch = 21
    state.restore()
    assert v.numpy().tolist() == [1.0, 1.0] and state.batch == 20
    v.assign([3.0, 4.0])
    state.batch = 21
    state.commit()
    state.restore()
    assert v.numpy().tolist() == [3.0, 4.0] and state.batch == 21


def model_and_optimizer(seed: int) -> tuple[object, object]:
    import keras

    keras.utils.set_random_seed(seed)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    return model, keras.optimizers.Adam(0.01)


def train_step(model: object, opt: object) -> None:
    import tensorflow as tf

    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(model(tf.ones((4, 3))) ** 2)  # type: ignore[operator]
    variables = model.trainable_variables  # type: ignore[attr-defined]
    opt.apply_gradients(zip(tape.gradient(loss, variables), variables, strict=True))  # type: ignore[attr-defined]


def test_a_restarted_attempt_loads_the_committed_model_and_optimizer(
    hvd: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tfdist.horovod import elastic

    monkeypatch.setenv("TFDIST_RUN_DIR", str(tmp_path))
    monkeypatch.setenv("TFDIST_RESTART_COUNT", "0")
    monkeypatch.setattr(elastic, "_STATE_INDEX", itertools.repeat(0))  # each state: the first of a process
    model, opt = model_and_optimizer(1)
    state = hvd.elastic.KerasState(model, opt, epoch=0)  # type: ignore[attr-defined]
    hvd.elastic.run(lambda s: None)(state)  # type: ignore[attr-defined]
    for epoch in (1, 2):
        train_step(model, opt)
        state.epoch = epoch
        state.commit()
    committed = [v.numpy() for v in (*model.variables, *opt.variables)]  # type: ignore[attr-defined]
    train_step(model, opt)  # not committed: lost with the process

    monkeypatch.setenv("TFDIST_RESTART_COUNT", "1")
    model2, opt2 = model_and_optimizer(2)  # other initial weights, optimizer not built yet
    state2 = hvd.elastic.KerasState(model2, opt2, epoch=0)  # type: ignore[attr-defined]
    seen = []
    hvd.elastic.run(lambda s: seen.append(s.epoch))(state2)  # type: ignore[attr-defined]
    assert seen == [2]
    resumed = [v.numpy() for v in (*model2.variables, *opt2.variables)]  # type: ignore[attr-defined]
    assert len(resumed) == len(committed)
    assert all(np.array_equal(a, b) for a, b in zip(resumed, committed, strict=True))
    assert int(opt2.iterations.numpy()) == 2  # type: ignore[attr-defined]
