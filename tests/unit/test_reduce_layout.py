"""The packed layout and chunking of the MPI backend's all-reduce (pure arithmetic)."""

from __future__ import annotations

import pytest

from tfdist.sync.reduce import ALIGN_FLOATS, aligned, chunk, layout


def test_parts_start_on_64_byte_boundaries() -> None:
    offsets, length = layout([1, 16, 17, 0, 5])
    assert offsets == [0, 16, 32, 64, 64]
    assert length == 80
    assert all(o % ALIGN_FLOATS == 0 for o in offsets)


@pytest.mark.parametrize("n", [0, 1, 15, 16, 17, 1_199_882])
def test_aligned_is_the_next_multiple(n: int) -> None:
    assert aligned(n) % ALIGN_FLOATS == 0 and n <= aligned(n) < n + ALIGN_FLOATS


@pytest.mark.parametrize(("length", "count"), [(1, 3), (16, 2), (80, 3), (1000, 7), (1_199_888, 2)])
def test_chunks_tile_the_buffer_without_overlap(length: int, count: int) -> None:
    bounds = [chunk(length, i, count) for i in range(count)]
    covered = [i for lo, hi in bounds for i in range(lo, hi)]
    assert covered == list(range(length))
    assert all(lo % ALIGN_FLOATS == 0 for lo, hi in bounds if lo < length)
