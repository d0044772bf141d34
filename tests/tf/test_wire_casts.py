"""The 16-bit wire's conversions in the graph (TensorFlow's casts, one rank per node) and in NumPy
(:mod:`tfdist.sync.wire`, the coordinator's buckets and the shared-memory level) give the same bits, so
every path of a 16-bit sum gives the same values."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from tfdist.sync.wire import decode, encode

WIRE = {"fp16": tf.float16, "bf16": tf.bfloat16}


def values_of_every_kind() -> np.ndarray:
    rng = np.random.default_rng(0)
    patterns = rng.integers(0, 2**32, 200_000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    gradients = (rng.standard_normal(100_000) * 10.0 ** rng.uniform(-9, 1, 100_000)).astype(np.float32)
    edges = np.float32(2.0) ** np.arange(-27, 17, dtype=np.float32)  # both formats' subnormal and top edges
    near = np.concatenate([edges, np.nextafter(edges, 0), np.nextafter(edges, np.inf), 1.5 * edges])
    specials = np.array([0.0, -0.0, np.inf, -np.inf, 65504, 65520, 3e38], np.float32)
    return np.concatenate([patterns, gradients, near, -near, specials])


@pytest.mark.parametrize("compression", ["fp16", "bf16"])
def test_tensorflow_and_numpy_round_to_the_same_bits(compression: str) -> None:
    values = values_of_every_kind()
    with np.errstate(over="ignore", invalid="ignore"):
        numpy_bits = encode(values, compression).view(np.uint16)
    graph_bits = tf.bitcast(tf.cast(values, WIRE[compression]), tf.uint16).numpy()
    nan = np.isnan(values)
    assert np.array_equal(graph_bits[~nan], numpy_bits[~nan])
    assert np.isnan(decode(graph_bits[nan], compression)).all()  # a NaN stays a NaN on both paths


@pytest.mark.parametrize("compression", ["fp16", "bf16"])
def test_tensorflow_and_numpy_widen_every_16_bit_value_alike(compression: str) -> None:
    every = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    graph = tf.cast(tf.bitcast(tf.constant(every), WIRE[compression]), tf.float32).numpy()
    numpy_values = decode(every, compression)
    nan = np.isnan(numpy_values)
    assert np.array_equal(np.isnan(graph), nan)
    assert np.array_equal(graph[~nan].view(np.uint32), numpy_values[~nan].view(np.uint32))
