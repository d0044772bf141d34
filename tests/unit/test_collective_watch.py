"""The MPI backend's collective timeout without MPI: the one line composed from roll-call answers, the
Horovod messages of a join, and how a waiting thread meets the watch (a one-rank watch: no roll call).

The roll call itself, the timeouts and hvd.join run on real ranks in
tests/multiprocess/test_collective_timeout.py.
"""

from __future__ import annotations

import threading

import pytest

from tfdist.errors import CollectiveError
from tfdist.sync.reduce import Waiter
from tfdist.sync.request import join_unsupported, mismatch_message
from tfdist.sync.watch import Answer, Watch, rank_list, timeout_line, whereabouts


@pytest.mark.parametrize(
    ("ranks", "text"),
    [
        ([1], "rank 1"),
        ([3, 1], "ranks 1, 3"),
        ([5, 1, 2, 3], "ranks 1-3, 5"),
        ([0, 1, 4, 5], "ranks 0, 1, 4, 5"),
    ],
)
def test_rank_lists_are_short(ranks: list[int], text: str) -> None:
    assert rank_list(ranks) == text


@pytest.mark.parametrize(
    ("answer", "text"),
    [
        (None, "did not answer within 2 s: busy outside any collective"),
        (Answer(3, (("a barrier", 12, 5.4),)), "is waiting in a barrier (collective #12) since 5 s"),
        (Answer(3, (("a barrier", 12, 5.4),), timed_out=True), "since 5 s (timed out too)"),
        (Answer(None, (), unreachable="connection closed"), "cannot be reached (connection closed)"),
    ],
)
def test_each_answer_reads_as_where_the_rank_is(answer: Answer | None, text: str) -> None:
    assert text in whereabouts(answer, 2.0)


def line(size: int, answers: dict[int, Answer], step: int | None = 41) -> str:
    return timeout_line(0, size, ("the gradient all-reduce", 88, 300.4), step, 300.0, answers, 2.0)


def test_a_rank_that_does_not_answer_is_the_one_named() -> None:
    text = line(2, {})
    assert text.startswith(
        "the gradient all-reduce waited 300 s on rank 0 at step 41 (collective #88, "
        "TFDIST_COLLECTIVE_TIMEOUT=300): rank 1 had not arrived: it did not answer within 2 s"
    )
    assert "Hint: every rank must run the same collectives in the same order" in text
    assert "\n" not in text


def test_ranks_waiting_in_the_same_collective_arrived_the_others_are_grouped_by_whereabouts() -> None:
    here = Answer(41, (("the gradient all-reduce", 88, 300.0),))
    elsewhere = Answer(41, (("a barrier", 88, 12.0),))
    text = line(6, {1: here, 2: elsewhere, 4: here, 5: Answer(None, (), unreachable="gone")}, step=None)
    assert " at step" not in text  # the loop did not say
    assert (
        "ranks 2, 3, 5 had not arrived: rank 2 is waiting in a barrier (collective #88) since 12 s; "
        "rank 3 did not answer within 2 s"
    ) in text
    assert "rank 5 cannot be reached (gone): its process is gone; ranks 1, 4 waited in it too" in text


def test_when_every_rank_waits_in_it_the_line_says_so() -> None:
    here = Answer(41, (("the gradient all-reduce", 88, 300.0),))
    assert "every other rank waits in it too (ranks 1, 2): an MPI link or process is stuck" in line(
        3, {1: here, 2: here}
    )


def test_a_mismatch_with_a_joined_rank_compares_the_ranks_that_sent_it() -> None:
    theirs = [
        None,
        ("ALLREDUCE", (0, 1.0, 1.0), "float32[3]", ["<f4"]),
        ("ALLREDUCE", (0, 1.0, 1.0), "float32[4]", ["<f4"]),
    ]
    assert mismatch_message("x", theirs).startswith(
        "Mismatched ALLREDUCE tensor shapes: rank 1 sent float32[3], but rank 2 sent float32[4]"
    )


def test_collectives_other_than_sums_fail_with_horovods_words_while_a_rank_is_joined() -> None:
    text = join_unsupported("BROADCAST", "w", [0, 2])
    assert text.startswith("Broadcast is not supported with Join at this time. (collective 'w': ranks 0, 2")
    assert "sparse_to_dense=True" in join_unsupported("ALLGATHER", "g", [1])


class Late:
    """An MPI request stand-in (``Test()``) that completes once ``done`` is set."""

    def __init__(self) -> None:
        self.done = threading.Event()

    def Test(self) -> bool:
        return self.done.is_set()


def test_a_slow_wait_counts_as_waiting_only_while_it_lasts() -> None:
    watch = Watch(None, None, rank=0, size=1, timeout_s=0.0)
    watch.begin("a barrier")
    request = Late()
    seen: list[tuple[tuple[str, int, float], ...]] = []
    timer = threading.Timer(0.6, lambda: (seen.append(watch._whereabouts().waits), request.done.set()))
    timer.start()
    Waiter(0.0, 0.001, 1, watch).wait(request)
    timer.join()
    assert [(label, number) for label, number, _ in seen[0]] == [("a barrier", 1)]
    assert watch._whereabouts().waits == ()  # over: no longer answers as waiting


def test_after_a_timeout_every_wait_and_every_new_collective_raise_it() -> None:
    watch = Watch(None, None, rank=0, size=1, timeout_s=5.0)
    watch.failed = CollectiveError("a barrier waited 5 s on rank 0: rank 1 had not arrived")
    with pytest.raises(CollectiveError, match="rank 1 had not arrived"):
        watch.begin("the gradient all-reduce")  # MPI's state is lost: nothing may pair with old requests
    with pytest.raises(CollectiveError, match="rank 1 had not arrived"):
        Waiter(0.0, 0.001, 1, watch).wait(Late())  # a thread still waiting learns it at its next look
