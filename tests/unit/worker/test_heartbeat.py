"""The worker's heartbeats, without a broker: every lease/3 while the handler runs, the handler's own
with progress, none after the outcome, and a redelivery of a lost attempt skipped without an event."""
from __future__ import annotations

import dataclasses
import threading

import pytest

from scheduler.worker import AttemptContext, Occurrence
from scheduler.worker.attempt import run_attempt
from scheduler.worker.heartbeat import interval_s
from scheduler.worker.view import ScheduleView, ViewEntry

RECORD = {"occurrence_id": "s1/v1/0", "schedule_id": "s1", "tenant": "acme", "schedule_version": 1,
          "scheduled_for_ms": 0, "available_at_ms": 0, "priority": "NORMAL", "payload": b"", "attempt": 1,
          "dst_rule": None, "catch_up": False, "lease_ms": 600}
OCC = Occurrence.from_record(RECORD)


def test_the_interval_is_a_third_of_the_lease_with_a_floor():
    assert interval_s(30_000) == 10.0 and interval_s(600) == pytest.approx(0.2) and interval_s(10) == 0.1
    assert Occurrence.from_record({k: v for k, v in RECORD.items() if k != "lease_ms"}).lease_ms == 30_000


def test_heartbeats_run_while_the_handler_runs_and_stop_before_the_outcome():
    """Driven by the beats themselves, not by a band of wall-clock time: the handler waits for the thread's
    beats, beats once itself, waits for more, and returns; the thread is joined before the outcome."""
    written: list[dict] = []
    recorded = threading.Condition()
    reported: list[bool] = []

    def record(event: dict) -> None:
        with recorded:
            written.append(event)
            recorded.notify_all()

    def beats() -> int:
        return sum(e["kind"] == "HEARTBEAT" for e in written)

    def await_beats(count: int) -> None:
        with recorded:
            assert recorded.wait_for(lambda: beats() >= count, timeout=10), f"only {beats()} heartbeats"

    def handler(occurrence: Occurrence, ctx: AttemptContext) -> None:
        await_beats(2)  # the thread's, every lease/3 while the handler runs
        reported.append(ctx.heartbeat(progress="half"))
        await_beats(4)  # and on after the handler's own

    ctx = AttemptContext.fresh()
    outcome = run_attempt(OCC, ctx, handler, ScheduleView(), "w1", lambda: 1, record)
    kinds = [e["kind"] for e in written]
    assert kinds[0] == "STARTED" and set(kinds[1:]) == {"HEARTBEAT"} and kinds.count("HEARTBEAT") >= 4, kinds
    progress = [e["progress"] for e in written]
    assert reported == [True] and progress.count("half") == 1 and progress.index("half") >= 3, progress
    assert {e["attempt_token"] for e in written} == {ctx.attempt_token}
    assert outcome is not None and outcome["kind"] == "SUCCEEDED"
    # No heartbeat after the outcome: the beating thread is gone (joined before run_attempt returned), and the
    # handler's own renewal is refused.
    beating = [t for t in threading.enumerate() if t.name == f"heartbeat-{ctx.attempt_token[:8]}"]
    assert beating == [], "a heartbeat thread outlived its attempt"
    assert not ctx.heartbeat(), "no renewal once the handler returned"
    assert [e["kind"] for e in written] == kinds


def test_a_redelivered_lost_attempt_is_skipped_and_a_running_one_learns_of_its_loss():
    view = ScheduleView()
    view.apply("s1", ViewEntry(1, "ACTIVE", frozenset({("s1/v1/0", 1, "old-token")})))
    written: list[dict] = []
    assert run_attempt(OCC, AttemptContext.fresh(), lambda o, c: None, view, "w1", lambda: 1, written.append) is None
    assert written == []

    retry = dataclasses.replace(OCC, attempt=2)
    seen: dict[str, bool] = {}

    def handler(occurrence: Occurrence, ctx: AttemptContext) -> None:
        view.apply("s1", ViewEntry(1, "ACTIVE", frozenset({("s1/v1/0", 2, ctx.attempt_token)})))
        seen["cancelled"] = ctx.cancelled.wait(1)
        seen["lost"] = ctx.lease_lost.is_set()
        seen["renewed"] = ctx.heartbeat()

    outcome = run_attempt(retry, AttemptContext.fresh(), handler, view, "w1", lambda: 1, written.append)
    assert seen == {"cancelled": True, "lost": True, "renewed": False}
    assert outcome is not None and outcome["kind"] == "SUCCEEDED", "written, and refused by the scheduler"
