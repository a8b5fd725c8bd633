"""The tests' one polling helper: returns the condition's value, names what it waited for at the deadline."""
from __future__ import annotations

import itertools

import pytest

from helpers.waiting import wait_until


def test_returns_the_first_truthy_value_of_the_condition() -> None:
    values = iter([0, None, [], "ready"])
    assert wait_until(lambda: next(values), timeout=5, interval=0) == "ready"


def test_names_what_it_waited_for_at_the_deadline() -> None:
    with pytest.raises(AssertionError, match="timed out after 0.05s waiting for the topic"):
        wait_until(lambda: False, timeout=0.05, what="the topic", interval=0.01)
    with pytest.raises(AssertionError, match="waiting for 3 partitions, saw 1"):
        wait_until(lambda: False, timeout=0.01, what=lambda: "3 partitions, saw 1", interval=0.01)


def test_ignored_errors_count_as_not_yet_and_others_fail_at_once() -> None:
    calls = itertools.count()

    def flaky() -> bool:
        if next(calls) < 2:
            raise KeyError("not propagated yet")
        return True

    assert wait_until(flaky, timeout=5, interval=0, ignoring=(KeyError,)) is True
    with pytest.raises(KeyError):
        wait_until(lambda: {}["missing"], timeout=5, interval=0)
