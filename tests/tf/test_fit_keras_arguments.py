"""model.fit's arguments through tfdist.fit in one process: bad values are one clear ConfigError naming what
was received; BackupAndRestore becomes tfdist's step-exact checkpoints (resume ≡ an uninterrupted run)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tfdist.errors import ConfigError

rng = np.random.default_rng(1)
X = rng.normal(size=(200, 4)).astype("float32")
Y = (X[:, 0] > 0).astype("int32") + (X[:, 1] > 1).astype("int32")  # classes 0, 1, 2


def classifier(seed: int = 0):
    import keras

    keras.utils.set_random_seed(seed)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
    model.compile(
        optimizer=keras.optimizers.Adam(0.01),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    return model


def fit(model, data=(X, Y), **kwargs):
    import tfdist

    kwargs.setdefault("epochs", 2)
    if isinstance(data, tuple):
        kwargs.setdefault("batch_size", 32)
    return tfdist.fit(model, data, verbose=0, **kwargs)


def dataset():
    import tensorflow as tf

    return tf.data.Dataset.from_tensor_slices((X, Y)).batch(32)


@pytest.mark.parametrize(
    ("data", "kwargs", "expected"),
    [
        ("dataset", {"validation_split": 0.2}, "validation_split=0.2 needs NumPy .x, y. training data"),
        ("arrays", {"validation_split": 1.5}, r"validation_split=1.5 must be a fraction in \[0, 1\)"),
        ("arrays", {"validation_split": 0.999}, "of 200 examples leaves no training example"),
        (
            "arrays",
            {"class_weight": {0: 1.0, 5: 2.0}},
            r"names class\(es\) \[5\] but the model's output has 3",
        ),
        ("arrays", {"class_weight": {0: 1.0, "1": 2.0}}, "key '1' is not a class id"),
        ("arrays", {"class_weight": {0: -1.0}}, r"class_weight\[0\]=-1.0 must be a finite number >= 0"),
        ("arrays", {"class_weight": [1.0, 2.0]}, "must be a non-empty dict"),
        ("arrays", {"initial_epoch": 2, "epochs": 2}, "initial_epoch=2 is not below epochs=2"),
        ("arrays", {"initial_epoch": -1}, "initial_epoch=-1 must be an integer >= 0"),
        ("arrays", {"validation_freq": 0}, "validation_freq=0 must be a positive integer"),
        ("arrays", {"validation_freq": [0, 2]}, r"validation_freq=\[0, 2\]"),
        ("arrays", {"validation_steps": 0}, "validation_steps=0 must be a positive integer"),
    ],
)
def test_bad_keras_arguments_are_one_clear_line(data: str, kwargs: dict, expected: str) -> None:
    with pytest.raises(ConfigError, match=expected) as info:
        fit(classifier(), dataset() if data == "dataset" else (X, Y), **kwargs)
    assert "\n" not in str(info.value)


def test_class_weight_naming_a_class_no_label_has() -> None:
    y = np.minimum(Y, 1)  # labels 0 and 1 only; the model could name 3 classes
    with pytest.raises(ConfigError, match=r"names class\(es\) \[2\] that no training label has"):
        fit(classifier(), (X, y), class_weight={0: 1.0, 2: 4.0})


def test_class_weight_with_sample_weights_is_refused_as_in_keras() -> None:
    import tensorflow as tf

    weighted = tf.data.Dataset.from_tensor_slices((X, Y, np.ones(200, "float32"))).batch(32)
    with pytest.raises(ConfigError, match="class_weight and sample weights"):
        fit(classifier(), weighted, class_weight={0: 2.0})


def test_backup_and_restore_resumes_to_the_uninterrupted_run(tmp_path: Path) -> None:
    import keras

    uninterrupted = classifier()
    fit(uninterrupted, epochs=3)
    backup = tmp_path / "backup"
    first = classifier()
    callback = keras.callbacks.BackupAndRestore(str(backup), delete_checkpoint=False)
    fit(first, epochs=2, callbacks=[callback])  # the run "dies" after epoch 2 of 3
    assert any(backup.iterdir())
    resumed = classifier(seed=7)  # fresh weights: everything must come from the backup
    history = fit(resumed, epochs=3, callbacks=[keras.callbacks.BackupAndRestore(str(backup))])
    for a, b in zip(resumed.get_weights(), uninterrupted.get_weights(), strict=True):
        np.testing.assert_allclose(a, b, atol=1e-6, rtol=0)
    assert len(history.history["loss"]) == 3  # the whole run's history, as after any tfdist resume
    assert not backup.exists()  # delete_checkpoint=True (Keras' default): a finished run leaves none


def test_backup_and_restore_save_freq_and_a_second_directory(tmp_path: Path) -> None:
    import keras

    model = classifier()
    history = fit(
        model, epochs=1, callbacks=[keras.callbacks.BackupAndRestore(str(tmp_path / "b"), save_freq=3)]
    )
    assert history.summary["steps"] == 7  # 200 examples / 32: 6 full batches and a partial one
    with pytest.raises(ConfigError, match="name two directories"):
        fit(
            classifier(),
            epochs=1,
            checkpoint_dir=str(tmp_path / "c"),
            callbacks=[keras.callbacks.BackupAndRestore(str(tmp_path / "b"))],
        )
    assert not (tmp_path / "c").exists()  # nothing written for a refused run
