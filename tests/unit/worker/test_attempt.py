"""One attempt's steps, without a broker: stale check, STARTED before the handler, the outcome."""
from __future__ import annotations

import threading

import pytest

from scheduler.worker import AttemptContext, Occurrence, PermanentError, RetryableError
from scheduler.worker.attempt import run_attempt
from scheduler.worker.errors import classify
from scheduler.worker.events import attempt_event
from scheduler.worker.occurrence import from_ms, to_ms
from scheduler.worker.view import ScheduleView, ViewEntry

RECORD = {"occurrence_id": "s1/v2/1767225600123", "schedule_id": "s1", "tenant": "acme", "schedule_version": 2,
          "scheduled_for_ms": 1_767_225_600_123, "available_at_ms": 1_767_225_660_000, "priority": "HIGH",
          "payload": b"p", "attempt": 3, "dst_rule": None, "catch_up": True}
OCC = Occurrence.from_record(RECORD)


def run(handler, view: ScheduleView | None = None):
    written: list[dict] = []
    calls: list[str] = []

    def wrapped(occurrence, ctx):
        calls.append(f"handler:{len(written)}")
        return handler(occurrence, ctx)

    ctx = AttemptContext.fresh()
    outcome = run_attempt(OCC, ctx, wrapped, view or ScheduleView(), "w1", lambda: 42, written.append)
    return written, outcome, calls, ctx


def test_occurrence_fields_are_python_types_and_times_round_trip_exactly():
    assert OCC.scheduled_for.isoformat() == "2026-01-01T00:00:00.123000+00:00"
    assert to_ms(OCC.scheduled_for) == RECORD["scheduled_for_ms"] and to_ms(from_ms(-1)) == -1
    assert (OCC.priority, OCC.attempt, OCC.catch_up, OCC.payload) == ("high", 3, True, b"p")


def test_started_is_written_before_the_handler_and_success_follows_with_the_same_token():
    written, outcome, calls, ctx = run(lambda o, c: None)
    assert calls == ["handler:1"]
    assert [e["kind"] for e in written] == ["STARTED"] and outcome["kind"] == "SUCCEEDED"
    assert written[0]["attempt_token"] == outcome["attempt_token"] == ctx.attempt_token
    assert outcome["attempt"] == 3 and outcome["scheduled_for_ms"] == RECORD["scheduled_for_ms"]
    assert outcome["worker_id"] == "w1" and outcome["at_ms"] == 42


@pytest.mark.parametrize(("error", "retryable", "error_class"), [
    (RetryableError("503"), True, "scheduler.worker.errors.RetryableError"),
    (PermanentError("bad input"), False, "scheduler.worker.errors.PermanentError"),
    (ZeroDivisionError("division by zero"), True, "ZeroDivisionError"),
])
def test_handler_exceptions_become_failed_events(error, retryable, error_class):
    def handler(o, c):
        raise error

    written, outcome, _, _ = run(handler)
    assert outcome["kind"] == "FAILED"
    assert (outcome["retryable"], outcome["error_class"], outcome["error_message"]) == (retryable, error_class, str(error))


def test_a_subclass_of_permanent_error_is_permanent():
    class CardDeclined(PermanentError):
        pass

    assert classify(CardDeclined("no")).retryable is False


@pytest.mark.parametrize(("entry", "reason"), [
    (ViewEntry(3, "ACTIVE"), "schedule is at version 3 (ACTIVE); the occurrence was made from version 2"),
    (ViewEntry(2, "CANCELED"), "schedule is CANCELED"),
    (ViewEntry(2, "PAUSED"), "schedule is PAUSED"),
    (ViewEntry(None, "DELETED"), "schedule was deleted"),
])
def test_stale_occurrences_are_skipped_without_calling_the_handler(entry, reason):
    view = ScheduleView()
    view.apply("s1", entry)
    written, outcome, calls, _ = run(lambda o, c: None, view)
    assert calls == [] and written == []
    assert (outcome["kind"], outcome["error_message"], outcome["error_class"]) == ("SKIPPED_STALE", reason,
                                                                                  "StaleOccurrence")


@pytest.mark.parametrize("entry", [ViewEntry(2, "ACTIVE"), ViewEntry(1, "CANCELED"), ViewEntry(2, "COMPLETED"), None])
def test_current_or_lagging_views_let_the_occurrence_run(entry):
    view = ScheduleView()
    if entry is not None:
        view.apply("s1", entry)
    _, outcome, calls, _ = run(lambda o, c: None, view)
    assert calls and outcome["kind"] == "SUCCEEDED"


def test_a_cancellation_seen_while_the_handler_runs_sets_ctx_cancelled():
    view = ScheduleView()
    view.apply("s1", ViewEntry(2, "ACTIVE"))
    seen: list[bool] = []

    def handler(o, ctx):
        threading.Thread(target=view.apply, args=("s1", ViewEntry(3, "CANCELED"))).start()
        seen.append(ctx.cancelled.wait(5))

    _, outcome, _, _ = run(handler, view)
    assert seen == [True] and outcome["kind"] == "SUCCEEDED"
    view.apply("s2", ViewEntry(1, "CANCELED"))  # no watcher left behind for the finished attempt


def test_events_refuse_inconsistent_fields():
    with pytest.raises(ValueError):
        attempt_event(OCC, "FAILED", "t", "w", 0)
    with pytest.raises(ValueError):
        attempt_event(OCC, "SUCCEEDED", "t", "w", 0, reason="stale")
