"""Whether a running job can grow to a size: what the workers' training offers (tfdist.resize.refusal)."""

from __future__ import annotations

import pytest

from tfdist import resize

FIT = {"by": "tfdist.fit", "global_batch": 12, "replicas_per_worker": 1}


@pytest.mark.parametrize(
    ("offers", "nodes", "nproc", "expected"),
    [
        ([FIT], 2, 1, None),
        ([FIT, FIT], 3, 2, None),  # 12 over 6 replicas
        ([{**FIT, "global_batch": 9}], 2, 1, "global batch 9 is not divisible by 2 replicas"),
        ([{**FIT, "replicas_per_worker": 4}], 2, 1, "global batch 12 is not divisible by 8 replicas"),
        (
            [{"by": "model.fit with BackupAndRestore", "global_batch": None, "replicas_per_worker": 1}],
            3,
            1,
            None,
        ),
        ([{"by": "hvd.elastic.run", "global_batch": None, "replicas_per_worker": 1}], 5, 1, None),
    ],
)
def test_what_can_grow(offers: list, nodes: int, nproc: int, expected: str | None) -> None:
    assert resize.refusal(offers, nodes, nproc) == expected


@pytest.mark.parametrize("offers", [[], [None], [FIT, None]])
def test_a_worker_that_offers_nothing_keeps_the_job_its_size(offers: list) -> None:
    why = resize.refusal(offers, 2, 1)
    assert why is not None and why.startswith("its workers cannot stop at a step boundary and resume")
    assert "BackupAndRestore" in why and "hvd.elastic.run" in why


def test_an_offer_and_a_request_are_what_the_progress_record_and_the_vote_read() -> None:
    resize.offer("tfdist.fit", 12, 1)
    try:
        assert resize.offered() == FIT
        assert not resize.requested()
    finally:
        resize.withdraw()
    assert resize.offered() is None
