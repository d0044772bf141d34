"""File-backed datasets streamed with tf.data (``folder:PATH``, ``tfrecord:GLOB``, ``tfds:NAME``), sharded by
file or by element; test splits are read into memory so that evaluation counts every example once."""

from __future__ import annotations

import glob
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from tfdist.errors import ConfigError
from tfdist.workloads.sharding import shard_policy

IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".gif")
SHUFFLE_BUFFER = 10_000


@dataclass(frozen=True)
class StreamDataset:
    """A streamed training split plus an in-memory test split."""

    name: str
    files: tuple[str, ...]
    train_examples: int
    parse: Callable[[Any], Any]
    reader: str  # "tfrecord" or "image"
    x_test: np.ndarray
    y_test: np.ndarray
    num_classes: int
    input_shape: tuple[int, ...]
    labels: tuple[int, ...] = ()

    def dataset_fn(self, global_batch: int, seed: int) -> Callable[[Any], Any]:
        """The per-worker input function for ``tfdist.fit`` (per-replica batches, sharded)."""
        import tensorflow as tf

        def make(ctx: Any) -> Any:
            policy = shard_policy(len(self.files), ctx.num_input_pipelines)
            per_replica = ctx.get_per_replica_batch_size(global_batch)
            slices = (list(self.files), list(self.labels)) if self.reader == "image" else list(self.files)
            ds = tf.data.Dataset.from_tensor_slices(slices)
            if policy == "FILE":
                ds = ds.shard(ctx.num_input_pipelines, ctx.input_pipeline_id)
            if self.reader == "tfrecord":
                ds = ds.interleave(
                    tf.data.TFRecordDataset, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True
                )
            if policy == "DATA":
                ds = ds.shard(ctx.num_input_pipelines, ctx.input_pipeline_id)
            ds = ds.map(self.parse, num_parallel_calls=tf.data.AUTOTUNE)
            ds = ds.shuffle(SHUFFLE_BUFFER, seed=seed).repeat()
            return ds.batch(per_replica, drop_remainder=True).prefetch(tf.data.AUTOTUNE)

        return make


def _image_parse(shape: tuple[int, ...]) -> Callable[..., Any]:
    import tensorflow as tf

    def parse(path: Any, label: Any) -> Any:
        image = tf.io.decode_image(tf.io.read_file(path), channels=shape[-1], expand_animations=False)
        image = tf.image.resize(image, shape[:2]) / 255.0
        return tf.ensure_shape(image, shape), label

    return parse


def folder_files(path: str) -> tuple[list[str], list[tuple[str, int]]]:
    """The class folders of ``folder:PATH`` and its images as ``(file, class index)``; ConfigError unless
    there are at least 2 classes with images (checked before any worker starts, and by the loader)."""
    if not os.path.isdir(path):
        raise ConfigError(
            f"dataset folder:{path} does not exist. Hint: give a directory with one sub-folder per class."
        )
    classes = sorted(d for d in os.listdir(path) if os.path.isdir(os.path.join(path, d)))
    files = [
        (os.path.join(path, c, f), i)
        for i, c in enumerate(classes)
        for f in sorted(os.listdir(os.path.join(path, c)))
        if f.lower().endswith(IMAGE_EXTENSIONS)
    ]
    if len(classes) < 2 or not files:
        raise ConfigError(
            f"dataset folder:{path} has {len(classes)} class folder(s) and {len(files)} image(s); it needs "
            f"at least 2 class sub-folders with images ({', '.join(IMAGE_EXTENSIONS)})."
        )
    return classes, files


def tfrecord_files(pattern: str) -> list[str]:
    """The files ``tfrecord:GLOB`` matches, sorted; ConfigError when none."""
    files = sorted(glob.glob(pattern))
    if not files:
        raise ConfigError(
            f"dataset tfrecord:{pattern} matches no file. Hint: quote the glob, e.g. "
            "'tfrecord:data/train-*.tfrecord'."
        )
    return files


def check_source(name: str) -> None:
    """ConfigError when a ``folder:`` or ``tfrecord:`` dataset has nothing to read on this machine."""
    kind, _, arg = name.partition(":")
    if kind == "folder":
        folder_files(arg)
    elif kind == "tfrecord":
        tfrecord_files(arg)


def load_folder(
    path: str, shape: tuple[int, ...] = (64, 64, 3), test_fraction: float = 0.2, seed: int = 0
) -> StreamDataset:
    """One sub-folder per class; images are decoded and resized to ``shape``."""
    classes, files = folder_files(path)
    order = np.random.default_rng(seed).permutation(len(files))
    cut = max(1, int(len(files) * test_fraction))
    test, train = [files[i] for i in order[:cut]], [files[i] for i in order[cut:]]
    parse = _image_parse(shape)
    x_test, y_test = _materialise(test, parse)
    paths, labels = tuple(p for p, _ in train), tuple(lbl for _, lbl in train)
    return StreamDataset(
        f"folder:{path}", paths, len(train), parse, "image", x_test, y_test, len(classes), shape, labels
    )


def _materialise(pairs: list[tuple[str, int]], parse: Callable[..., Any]) -> tuple[np.ndarray, np.ndarray]:
    import tensorflow as tf

    ds = tf.data.Dataset.from_tensor_slices(([p for p, _ in pairs], [lbl for _, lbl in pairs])).map(parse)
    xs, ys = zip(*[(x.numpy(), y.numpy()) for x, y in ds], strict=True)
    return np.stack(xs).astype("float32"), np.asarray(ys, dtype="int64")


def load_tfrecord(pattern: str, test_fraction: float = 0.1) -> StreamDataset:
    """TFRecord files of tf.train.Example with ``image`` (encoded PNG/JPEG bytes) and ``label`` (int64)."""
    import tensorflow as tf

    files = tfrecord_files(pattern)
    spec = {"image": tf.io.FixedLenFeature([], tf.string), "label": tf.io.FixedLenFeature([], tf.int64)}
    first = tf.io.parse_single_example(next(iter(tf.data.TFRecordDataset(files[:1]))), spec)
    shape = tuple(int(d) for d in tf.io.decode_image(first["image"], expand_animations=False).shape)

    def parse(record: Any) -> Any:
        example = tf.io.parse_single_example(record, spec)
        image = tf.io.decode_image(example["image"], channels=shape[-1], expand_animations=False)
        return tf.ensure_shape(tf.cast(image, tf.float32) / 255.0, shape), example["label"]

    records = tf.data.TFRecordDataset(files).map(parse)
    pairs = [(x.numpy(), int(y.numpy())) for x, y in records]
    cut = max(1, int(len(pairs) * test_fraction))
    labels = np.asarray([y for _, y in pairs])
    x_test = np.stack([x for x, _ in pairs[:cut]]).astype("float32")
    classes = int(labels.max()) + 1
    # The test examples are also streamed in training (files are not split); say so rather than hide it.
    return StreamDataset(
        f"tfrecord:{pattern}",
        tuple(files),
        len(pairs),
        parse,
        "tfrecord",
        x_test,
        labels[:cut],
        classes,
        shape,
    )


def load_tfds(name: str, data_dir: str | None) -> StreamDataset:
    """A dataset prepared beforehand with ``tfds build NAME --data_dir DIR``; never downloads."""
    try:
        import tensorflow_datasets as tfds
    except ImportError:
        raise ConfigError(
            "dataset tfds:... needs tensorflow-datasets. Hint: pip install 'tfdist[data]'."
        ) from None
    root = os.path.expanduser(data_dir or os.environ.get("TFDS_DATA_DIR", "~/tensorflow_datasets"))
    infos = sorted(glob.glob(os.path.join(root, name, "**", "dataset_info.json"), recursive=True))
    if not infos:
        raise ConfigError(
            f"tfds dataset {name!r} is not prepared in {root}. Hint: on a machine with internet run `tfds "
            f"build {name} --data_dir {root}` and copy the directory here; tfdist never downloads."
        )
    builder = tfds.builder_from_directory(os.path.dirname(infos[-1]))
    keys = builder.info.supervised_keys or ("image", "label")
    split_test = "test" if "test" in builder.info.splits else "validation"
    if "train" not in builder.info.splits or split_test not in builder.info.splits:
        raise ConfigError(
            f"tfds dataset {name!r} needs 'train' and 'test' (or 'validation') splits; it has "
            f"{list(builder.info.splits)}."
        )
    test = [
        (np.asarray(e[keys[0]]), int(e[keys[1]])) for e in tfds.as_numpy(builder.as_dataset(split=split_test))
    ]
    x_test = np.stack([x for x, _ in test]).astype("float32") / 255.0
    files = tuple(sorted(glob.glob(os.path.join(os.path.dirname(infos[-1]), "*-train.tfrecord*"))))
    features, y_test = builder.info.features, np.asarray([y for _, y in test])
    examples, parse = builder.info.splits["train"].num_examples, _tfds_parse(features, keys)
    classes, shape = features[keys[1]].num_classes, tuple(x_test.shape[1:])
    return StreamDataset(f"tfds:{name}", files, examples, parse, "tfrecord", x_test, y_test, classes, shape)


def _tfds_parse(features: Any, keys: tuple[str, str]) -> Callable[[Any], Any]:
    import tensorflow as tf

    def parse(record: Any) -> Any:
        example = features.deserialize_example(record)
        return tf.cast(example[keys[0]], tf.float32) / 255.0, tf.cast(example[keys[1]], tf.int64)

    return parse
