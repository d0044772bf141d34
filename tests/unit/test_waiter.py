"""The MPI backend's waiter: how many times it polls a running request, and that it returns at completion.

The request is a stand-in with MPI's ``Test()`` contract (True once complete), so the count of polls is
exact; real MPI requests go through the same code in the multi-process tests.
"""

from __future__ import annotations

import pytest

from tfdist.sync.reduce import Waiter


class Request:
    """Completes at its ``done_at``-th ``Test()``."""

    def __init__(self, done_at: int) -> None:
        self.done_at, self.polls = done_at, 0

    def Test(self) -> bool:
        self.polls += 1
        return self.polls >= self.done_at


@pytest.mark.parametrize(("burst", "done_at"), [(1, 5), (4, 5), (16, 3), (16, 40)])
def test_the_waiter_polls_until_done_and_not_once_more(burst: int, done_at: int) -> None:
    request = Request(done_at)
    Waiter(0.0, 0.0, burst).wait(request)
    assert request.polls == done_at


def test_a_burst_below_one_still_polls() -> None:
    request = Request(3)
    Waiter(0.0, 0.0, 0).wait(request)
    assert request.polls == 3
