"""How Horovod's gradient wrappers group gradients into collectives (``groups=`` / ``num_groups=``, and
buckets across nodes), in submission order: the backward pass's, from the last variables back."""

from __future__ import annotations

import pytest

from tfdist.horovod.gradients import gradient_groups, groups_option


def tensors(*sizes: int) -> list[object]:
    import tensorflow as tf

    return [tf.zeros([n]) for n in sizes]


def test_a_count_makes_that_many_groups_of_consecutive_gradients() -> None:
    assert gradient_groups(tensors(1, 2, 3, 4, 5), 2) == [[4, 3], [2, 1, 0]]
    assert gradient_groups(tensors(1, 2), 5) == [[1], [0]]  # never more groups than gradients


def test_variable_lists_group_their_gradients_and_leave_the_rest_alone() -> None:
    import tensorflow as tf

    a, b, c, d = (tf.Variable(float(i)) for i in range(4))
    groups = groups_option([[a, c]], 0)
    refs = [v.ref() for v in (a, b, c, d)]
    assert gradient_groups(tensors(1, 1, 1, 1), groups, refs) == [[3], [2, 0], [1]]


def test_eagerly_and_on_one_process_everything_is_one_collective() -> None:
    assert gradient_groups(tensors(1, 2, 3), 0) == [[2, 1, 0]]
    assert gradient_groups(tensors(1, 2, 3), None) == [[2, 1, 0]]
    assert gradient_groups([], 3) == []


@pytest.mark.parametrize(
    ("groups", "num_groups", "message"),
    [(-1, 0, "non-negative integer"), (None, -2, "non-negative integer"), ("two", 0, "list of lists")],
)
def test_bad_groups_are_horovods_value_error(groups: object, num_groups: int, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        groups_option(groups, num_groups)


def test_num_groups_is_the_count_when_groups_is_not_given() -> None:
    assert groups_option(None, 3) == 3
    assert groups_option(2, 3) == 2
