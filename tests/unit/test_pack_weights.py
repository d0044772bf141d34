"""The packed copy of the initial weights that rank 0 broadcasts: the narrowest float type that holds
every value exactly, and each weight back with its shape and dtype."""

from __future__ import annotations

import numpy as np
import pytest

from tfdist.sync.base import pack_weights, unpack_weights


@pytest.mark.parametrize(
    ("dtypes", "packed"),
    [
        ((np.float32, np.float32), np.float32),  # the usual model: no float64 copy twice its size
        ((np.float32, np.float16), np.float32),
        ((np.float16,), np.float32),
        ((np.float32, np.int64), np.float64),  # a counter among the weights
        ((np.float64, np.float32), np.float64),
        ((np.int32,), np.float64),
    ],
)
def test_weights_pack_exactly_into_the_narrowest_float(dtypes: tuple, packed: type) -> None:
    rng = np.random.default_rng(0)
    weights = [
        (rng.normal(size=(3, 2)) * 1e3).astype(d) if np.issubdtype(d, np.floating) else
        np.array([2**40 + 3, -7], d) if d == np.int64 else np.array([2**30 + 1], d)
        for d in dtypes
    ]  # fmt: skip
    flat = pack_weights(weights)
    assert flat.dtype == packed and flat.size == sum(w.size for w in weights)
    for got, want in zip(unpack_weights(flat, weights), weights, strict=True):
        assert got.dtype == want.dtype and got.shape == want.shape
        assert np.array_equal(got, want)


def test_no_weights_pack_to_an_empty_vector() -> None:
    assert pack_weights([]).size == 0 and unpack_weights(pack_weights([]), []) == []
