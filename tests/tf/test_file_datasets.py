"""File-backed datasets (folder:, tfrecord:, tfds:) built on disk offline, then streamed into tfdist.fit."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from helpers.cli import tfdist
from tfdist.errors import ConfigError
from tfdist.workloads import datasets
from tfdist.workloads.sharding import shard_policy


@pytest.mark.parametrize(
    ("files", "workers", "policy"),
    [(None, 2, "DATA"), (1, 2, "DATA"), (2, 2, "FILE"), (16, 4, "FILE"), (3, 4, "DATA")],
)
def test_shard_policy(files: int | None, workers: int, policy: str) -> None:
    assert shard_policy(files, workers) == policy


def png_bytes(value: int) -> bytes:
    import tensorflow as tf

    image = np.full((8, 8, 3), value, np.uint8)
    return tf.io.encode_png(image).numpy()


@pytest.fixture
def image_folder(tmp_path: Path) -> Path:
    root = tmp_path / "images"
    for label, value in (("cats", 20), ("dogs", 200)):
        (root / label).mkdir(parents=True)
        for i in range(12):
            (root / label / f"{i}.png").write_bytes(png_bytes(value + i))
    return root


@pytest.fixture
def tfrecords(tmp_path: Path) -> str:
    import tensorflow as tf

    for shard in range(4):
        with tf.io.TFRecordWriter(str(tmp_path / f"train-{shard}.tfrecord")) as writer:
            for i in range(8):
                label = (shard + i) % 2
                feature = {
                    "image": tf.train.Feature(
                        bytes_list=tf.train.BytesList(value=[png_bytes(30 + 180 * label)])
                    ),
                    "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[label])),
                }
                writer.write(
                    tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()
                )
    return str(tmp_path / "train-*.tfrecord")


def train_briefly(data: datasets.StreamDataset) -> dict:
    import keras

    import tfdist

    model = keras.Sequential(
        [
            keras.Input(data.input_shape),
            keras.layers.Flatten(),
            keras.layers.Dense(data.num_classes, activation="softmax"),
        ]
    )
    model.compile(
        optimizer=keras.optimizers.SGD(0.5), loss="sparse_categorical_crossentropy", metrics=["accuracy"]
    )
    history = tfdist.fit(
        model,
        data.dataset_fn(8, 0),
        batch_size=8,
        steps_per_epoch=6,
        epochs=3,
        validation_data=(data.x_test, data.y_test),
        verbose=0,
    )
    return history.history


def test_folder_dataset_trains(image_folder: Path) -> None:
    data = datasets.load(f"folder:{image_folder}", image_size=8)
    assert (
        data.num_classes == 2
        and data.input_shape == (8, 8, 3)
        and data.train_examples + len(data.x_test) == 24
    )
    history = train_briefly(data)
    assert history["val_accuracy"][-1] == 1.0  # the two classes differ by brightness: trivially separable


def test_tfrecord_dataset_trains(tfrecords: str) -> None:
    data = datasets.load(f"tfrecord:{tfrecords}")
    assert len(data.files) == 4 and data.train_examples == 32 and data.num_classes == 2
    assert train_briefly(data)["val_accuracy"][-1] == 1.0


def test_tfds_prepared_offline_trains(tmp_path: Path) -> None:
    import tensorflow as tf
    import tensorflow_datasets as tfds

    x = np.stack([np.full((8, 8, 1), 20 + 200 * (i % 2), np.uint8) for i in range(40)])
    y = np.arange(40) % 2

    def split(n: int):
        return tf.data.Dataset.from_tensor_slices({"image": x[:n], "label": y[:n]})

    features = tfds.features.FeaturesDict(
        {"image": tfds.features.Image(shape=(8, 8, 1)), "label": tfds.features.ClassLabel(num_classes=2)}
    )
    tfds.dataset_builders.store_as_tfds_dataset(
        name="tinydigits",
        version="1.0.0",
        features=features,
        split_datasets={"train": split(40), "test": split(10)},
        config=None,
        data_dir=str(tmp_path),
    )
    data = datasets.load("tfds:tinydigits", data_dir=str(tmp_path))
    assert data.train_examples == 40 and data.num_classes == 2 and data.input_shape == (8, 8, 1)
    assert train_briefly(data)["val_accuracy"][-1] == 1.0


@pytest.mark.parametrize(
    ("name", "kwargs", "expected"),
    [
        ("folder:/no/such/dir", {}, "does not exist"),
        ("tfrecord:/no/such/*.tfrecord", {}, "matches no file"),
        ("tfds:mnist", {"data_dir": "/no/such/tfds"}, "is not prepared"),
        ("imagenet", {}, "unknown dataset 'imagenet'"),
        ("folder:", {}, "unknown dataset"),
    ],
)
def test_bad_datasets(name: str, kwargs: dict, expected: str) -> None:
    started = time.monotonic()
    with pytest.raises(ConfigError, match=expected):
        datasets.load(name, **kwargs)
    assert time.monotonic() - started < 30  # fail fast: never wait on a download


def test_empty_folder(tmp_path: Path) -> None:
    (tmp_path / "only").mkdir()
    with pytest.raises(ConfigError, match="needs at least 2 class sub-folders"):
        datasets.load(f"folder:{tmp_path}")


@pytest.mark.multiprocess
def test_two_workers_shard_tfrecord_files(tfrecords: str, tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = tfdist(
        "train", "--workers", "2", "--workload", "mnist-cnn", "--dataset", f"tfrecord:{tfrecords}",
        "--epochs", "2", "--batch-size-per-replica", "4", "--run-dir", str(out),
        timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert (out / "metrics.json").is_file()
