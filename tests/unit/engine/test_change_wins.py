"""A change accepted while an old-version fire is already due but not yet sent (its partition was behind or
failing over) wins over it, and the event says which it was (docs/time-semantics.md, "Changes win")."""
from __future__ import annotations

import pytest
from task_builder import CODEC, make_task, outputs

from scheduler.control.client import make_spec
from scheduler.engine.task import SchedulerTask
from scheduler.engine.timeline_keys import DISPATCH

MINUTE = 60_000
START = 1_800_000_000_000 - 1_800_000_000_000 % MINUTE + 5_000  # 5 s past a minute


@pytest.fixture
def active_every_minute(tmp_path) -> SchedulerTask:
    """An ACTIVE `* * * * *` schedule whose next two fires are materialized (horizon 120 s)."""
    task = make_task(tmp_path / "p0")
    store = task.store
    state = {"schedule_id": "s1", "tenant": "acme", "version": 1, "state": "PENDING",
             "spec": make_spec("cron", "* * * * *"), "idempotency_key": None, "create_command_id": "c0",
             "created_at_ms": START, "updated_at_ms": START, "next_fire_ms": None, "fired_count": 0, "pending": [],
             "running": [], "admission_waiters": ["c0"], "first_next_fires_ms": []}
    store.write({"schedules": {b"s1": CODEC.encode("ScheduleState", state)}}, {})
    grant = {"tenant": "acme", "schedule_id": "s1", "granted": True, "active_schedules": 1,
             "max_active_schedules": 100, "decided_at_ms": START, "running_slots": None}
    task.handlers["admission-results"](b"s1", CODEC.encode("AdmissionResult", grant), 0, START)
    task.committed({})
    yield task
    store.close()


def command(kind: str, issued_at_ms: int, spec: dict | None = None) -> bytes:
    return CODEC.encode("Command", {"command_id": f"c-{kind}", "type": kind, "schedule_id": "s1", "tenant": "acme",
                                    "idempotency_key": None, "expected_version": None, "spec": spec,
                                    "occurrence_id": None, "issued_at_ms": issued_at_ms, "backfill_from_ms": None,
                                    "backfill_to_ms": None, "overlap_override": None})


def events(task: SchedulerTask) -> list[dict]:
    return outputs(task, "events", "OccurrenceEvent")


@pytest.mark.parametrize("kind, overdue_kind, future_kind", [
    ("PAUSE", "INVALIDATED", "SKIPPED_PAUSED"),
    ("UPDATE", "INVALIDATED", "INVALIDATED"),
    ("CANCEL", "CANCELED", "CANCELED"),
])
def test_the_change_drops_a_fire_already_due_and_says_it_was_due(active_every_minute: SchedulerTask, kind: str,
                                                                 overdue_kind: str, future_kind: str) -> None:
    task = active_every_minute
    first_fire = START - START % MINUTE + MINUTE
    now_ms = first_fire + 2_500  # the first fire is due, the partition has not sent it yet
    assert [key for key, _ in task.scan.due(DISPATCH, now_ms)], "the first fire waits in the timeline"
    spec = make_spec("cron", "30 * * * *") if kind == "UPDATE" else None
    task.handlers["commands"](b"s1", command(kind, now_ms - 100, spec), 1, now_ms)
    reported = {e["scheduled_for_ms"]: e for e in events(task)}
    assert set(reported) == {first_fire, first_fire + MINUTE}
    overdue, future = reported[first_fire], reported[first_fire + MINUTE]
    assert (overdue["kind"], future["kind"]) == (overdue_kind, future_kind)
    assert "due 2500 ms before the change was accepted" in overdue["reason"]
    assert "before the change" not in future["reason"]
    task.committed({})
    assert [key for key, _ in task.scan.due(DISPATCH, now_ms)] == [], "the old version's fire is never sent afterwards"


def test_a_cancel_drops_an_occurrence_triggered_earlier_in_the_same_turn_below_the_dispatch_floor(
        active_every_minute: SchedulerTask) -> None:
    """The dispatch lane's floor sits at the first fire, a minute ahead; the triggered occurrence, due now,
    sorts below it. The floor speaks only of the store: the turn's own write must still be found and dropped."""
    task = active_every_minute
    now_ms = START + 1_000
    task.handlers["commands"](b"s1", command("TRIGGER", now_ms), 1, now_ms)
    task.handlers["commands"](b"s1", command("CANCEL", now_ms), 2, now_ms)
    results = [(r["status"], r["reason"]) for r in outputs(task, "results", "CommandResult")]
    assert results == [("ACCEPTED", None), ("ACCEPTED", None)]
    assert [e["kind"] for e in events(task) if e["scheduled_for_ms"] == now_ms] == ["CANCELED"]
    task.committed({})
    assert [key for key, _ in task.scan.due(DISPATCH, now_ms + 5_000)] == [], "nothing of s1 is left to send"
