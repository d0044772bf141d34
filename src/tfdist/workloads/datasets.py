"""Named datasets: ``digits`` (embedded, scikit-learn), ``synthetic`` (any shape, for benchmarks), and the
file-backed ``tfds:NAME``, ``folder:PATH`` and ``tfrecord:GLOB`` (see :mod:`tfdist.workloads.files`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from tfdist.errors import ConfigError, require
from tfdist.workloads import files
from tfdist.workloads.files import StreamDataset

__all__ = ["NAMES", "PREFIXES", "ArrayDataset", "StreamDataset", "check_name", "digits", "load", "synthetic"]

NAMES = ("digits", "synthetic")
PREFIXES = ("tfds:", "folder:", "tfrecord:")


@dataclass(frozen=True)
class ArrayDataset:
    """Train / test arrays with their input shape and number of classes."""

    name: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    num_classes: int

    @property
    def input_shape(self) -> tuple[int, ...]:
        """Shape of one example."""
        return tuple(self.x_train.shape[1:])


def digits(test_fraction: float = 0.2, seed: int = 0) -> ArrayDataset:
    """scikit-learn's shipped 8x8 handwritten digits (1,797 images): no download, scaled to [0, 1]."""
    require_packages("digits")
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    bunch = load_digits()
    x = (bunch.images / 16.0).astype("float32")[..., None]
    y = bunch.target.astype("int64")
    x_tr, x_te, y_tr, y_te = train_test_split(x, y, test_size=test_fraction, random_state=seed, stratify=y)
    return ArrayDataset("digits", x_tr, y_tr, x_te, y_te, 10)


def require_packages(name: str) -> None:
    """The one line naming the extra when dataset ``name`` needs a package that is missing."""
    if name == "digits":
        require("sklearn", "scikit-learn", "digits", "the digits dataset")


def synthetic(
    shape: tuple[int, ...] = (28, 28, 1), classes: int = 10, examples: int = 4096, seed: int = 0
) -> ArrayDataset:
    """Random images with random labels: for throughput, not accuracy."""
    rng = np.random.default_rng(seed)
    x = rng.random((examples, *shape), dtype=np.float32)
    y = rng.integers(0, classes, examples).astype("int64")
    cut = examples * 9 // 10
    return ArrayDataset("synthetic", x[:cut], y[:cut], x[cut:], y[cut:], classes)


def check_name(name: str) -> None:
    """ConfigError unless ``name`` is a built-in dataset or a ``tfds:`` / ``folder:`` / ``tfrecord:`` spec."""
    if name in NAMES or (name.startswith(PREFIXES) and name.split(":", 1)[1]):
        return
    raise ConfigError(
        f"unknown dataset {name!r}; choose one of {', '.join(NAMES)}, or tfds:NAME, folder:PATH, "
        "tfrecord:GLOB."
    )


def load(
    name: str,
    *,
    shape: tuple[int, ...] = (28, 28, 1),
    classes: int = 10,
    examples: int = 4096,
    seed: int = 0,
    data_dir: str | None = None,
    image_size: int = 64,
) -> Any:
    """Load a dataset by name: an ArrayDataset in memory, or a StreamDataset for file-backed data."""
    check_name(name)
    kind, _, arg = name.partition(":")
    if kind == "tfds":
        return files.load_tfds(arg, data_dir)
    if kind == "folder":
        return files.load_folder(arg, (image_size, image_size, 3), seed=seed)
    if kind == "tfrecord":
        return files.load_tfrecord(arg)
    if name == "digits":
        return digits(seed=seed)
    return synthetic(shape, classes, examples, seed)
