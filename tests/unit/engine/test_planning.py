"""Planning the timeline in strides (issue 27): a schedule is planned once its next fire comes within the
planning lead, then through the whole horizon; the wake-up lane's scans start at its floor; planning stops
at the turn's deadline."""
from __future__ import annotations

import time

import pytest
from task_builder import CODEC, admit_schedule, make_task

from scheduler.control.client import make_spec
from scheduler.engine.occurrence_timeline import MAX_STRIDE_MS, PLANNED_PER_CLOCK_READ, planning_lead_ms
from scheduler.engine.timeline_keys import DISPATCH, WAKE, due_ms_of

START = 1_800_000_000_000
HORIZON = 120_000


@pytest.fixture
def task(tmp_path):
    task = make_task(tmp_path / "p0", horizon_ms=HORIZON, max_active_schedules=1000)
    yield task
    task.store.close()


def planned_fires(task) -> list[int]:
    keys = task.store.keys_from("timeline", DISPATCH, bytes([DISPATCH[0] + 1]))
    return sorted(due_ms_of(key) for key in keys)


def commit(task) -> dict[bytes, bytes | None]:
    changes = dict(task.ctx.txn.changes["schedules"])
    task.changelog_records()
    task.committed({})
    return changes


def dispatch_due(task, now_ms: int) -> None:
    for _, (dispatcher, key, raw) in task.dispatcher.offers(DISPATCH, now_ms, 10_000):
        dispatcher.send(key, raw, now_ms)


def test_the_lead_is_the_horizon_less_half_of_it_at_most_a_minute():
    assert planning_lead_ms(120_000) == 60_000
    assert planning_lead_ms(3_600_000) == 3_600_000 - MAX_STRIDE_MS
    assert planning_lead_ms(5_000) == 2_500


def test_a_frequent_schedule_is_planned_a_stride_at_a_time_never_past_the_horizon(task):
    admit_schedule(task, "every10", make_spec("rate", "every 10s", anchor_at_ms=START), START)
    commit(task)
    assert planned_fires(task) == list(range(START + 10_000, START + HORIZON + 1, 10_000))

    # Until the next fire comes within the lead, nothing is planned and the state is not rewritten.
    for now in range(START + 1_000, START + 70_000, 1_000):
        dispatch_due(task, now)
        task.timeline.materialize_due(now, 100)
        assert commit(task) == {}, f"the state was rewritten at +{now - START} ms"

    now = START + 70_000  # the next fire, START + 130 s, is now 60 s ahead: one pass plans six fires
    dispatch_due(task, now)
    task.timeline.materialize_due(now, 100)
    saved = commit(task)
    assert list(saved) == [b"every10"], "one state write for the whole stride"
    assert planned_fires(task) == list(range(START + 80_000, now + HORIZON + 1, 10_000))
    state = CODEC.decode("ScheduleState", saved[b"every10"])
    assert state["next_fire_ms"] == now + HORIZON + 10_000
    assert sorted(ref["due_ms"] for ref in state["pending"]) == planned_fires(task), \
        "the pending list drops the dispatched entries and keeps the future ones"


def test_the_wake_lane_scans_start_past_the_wake_ups_already_taken(task):
    for n in range(20):
        admit_schedule(task, f"s{n}", make_spec("rate", "every 10s", anchor_at_ms=START + n * 100), START)
    commit(task)
    first = task.scan.floor(WAKE)
    for now in range(START + 60_000, START + 200_000, 5_000):
        dispatch_due(task, now)
        task.timeline.materialize_due(now, 100)
        commit(task)
    floor = task.scan.floor(WAKE)
    live = next(iter(task.store.keys_from("timeline", WAKE, bytes([WAKE[0] + 1]))))
    assert first < floor <= live, "the floor moved up past the taken wake-ups and no further than the first live one"
    assert task.timeline.next_wake_ms() == due_ms_of(live)


def test_planning_stops_at_the_turns_deadline_and_the_rest_waits_for_the_next_turn(task):
    count = 5 * PLANNED_PER_CLOCK_READ
    for n in range(count):
        admit_schedule(task, f"s{n}", make_spec("rate", "every 10s", anchor_at_ms=START + n), START)
    commit(task)
    now = START + 70_000
    assert task.timeline.materialize_due(now, 10_000, deadline=time.perf_counter() - 1) == PLANNED_PER_CLOCK_READ
    commit(task)
    assert task.timeline.materialize_due(now, 10_000) == count - PLANNED_PER_CLOCK_READ
