"""The schedule view's ordering rule and the priority buffers."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import pytest

from scheduler.worker.occurrence import AttemptContext, Occurrence, from_ms
from scheduler.worker.priority import PriorityBuffers
from scheduler.worker.view import ScheduleView, ViewEntry


def test_view_never_goes_back_to_an_older_version_but_accepts_a_recreation_after_deletion():
    view = ScheduleView()
    view.apply("s", ViewEntry(3, "CANCELED"))
    view.apply("s", ViewEntry(2, "ACTIVE"))
    assert view.get("s") == ViewEntry(3, "CANCELED")
    view.apply("s", ViewEntry(None, "DELETED"))
    view.apply("s", ViewEntry(1, "ACTIVE"))
    assert view.get("s") == ViewEntry(1, "ACTIVE")


def test_watching_an_already_cancelled_schedule_cancels_at_once_and_pause_does_not():
    view = ScheduleView()
    paused, cancelled = AttemptContext.fresh(), AttemptContext.fresh()
    view.apply("p", ViewEntry(2, "PAUSED"))
    view.apply("c", ViewEntry(2, "CANCELED"))
    view.watch("p", paused)
    view.watch("c", cancelled)
    assert not paused.cancelled.is_set() and cancelled.cancelled.is_set()
    assert not cancelled.lease_lost.is_set()


def test_a_lost_token_in_the_view_stops_only_that_attempt_and_marks_its_redeliveries_lost():
    view = ScheduleView()
    mine, other = AttemptContext.fresh(), AttemptContext.fresh()
    view.apply("s", ViewEntry(1, "ACTIVE"))
    view.watch("s", mine)
    view.watch("s", other)
    view.apply("s", ViewEntry(1, "ACTIVE", frozenset({("s/v1/0", 1, mine.attempt_token)})))
    assert mine.lease_lost.is_set() and mine.cancelled.is_set() and not mine.heartbeat()
    assert not other.cancelled.is_set()
    occurrence = Occurrence("s/v1/0", "s", "acme", 1, from_ms(0), from_ms(0), 1, b"", "normal", False)
    assert view.is_lost(occurrence)
    assert not view.is_lost(dataclasses.replace(occurrence, attempt=2))


@dataclass
class Rec:
    name: str
    topic_name: str
    partition_id: int

    def topic(self) -> str:
        return self.topic_name

    def partition(self) -> int:
        return self.partition_id


def test_buffers_give_the_highest_priority_first_and_keep_order_within_a_priority():
    buffers: PriorityBuffers[Rec] = PriorityBuffers(("high", "normal", "low"), capacity=10)
    for name, priority in [("l1", "low"), ("n1", "normal"), ("l2", "low"), ("h1", "high"), ("n2", "normal")]:
        buffers.add(priority, Rec(name, priority, 0))
    order = []
    while (taken := buffers.pop_next()) is not None:
        order.append(taken[1].name)
        if taken[1].name == "n1":
            buffers.add("high", Rec("h2", "high", 0))
    assert order == ["h1", "n1", "h2", "n2", "l1", "l2"]


def test_full_buffers_are_reported_for_pausing_and_lost_partitions_are_dropped():
    buffers: PriorityBuffers[Rec] = PriorityBuffers(("high", "low"), capacity=2)
    buffers.add("low", Rec("a", "low-topic", 0))
    buffers.add("low", Rec("b", "low-topic", 1))
    buffers.add("high", Rec("c", "high-topic", 0))
    assert buffers.full() == {"low"}
    assert buffers.drop_partitions([("low-topic", 1)]) == 1
    assert buffers.full() == set() and buffers.pending() == 2
    with pytest.raises(ValueError):
        PriorityBuffers(("high",), capacity=0)
