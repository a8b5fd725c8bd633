"""The worker's heartbeats, without a broker: every lease/3 while the handler runs, the handler's own
with progress, none after the outcome, and a redelivery of a lost attempt skipped without an event."""
from __future__ import annotations

import dataclasses
import time

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
    written: list[dict] = []
    reported: list[bool] = []

    def handler(occurrence: Occurrence, ctx: AttemptContext) -> None:
        time.sleep(0.7)
        reported.append(ctx.heartbeat(progress="half"))
        time.sleep(0.5)

    ctx = AttemptContext.fresh()
    outcome = run_attempt(OCC, ctx, handler, ScheduleView(), "w1", lambda: 1, written.append)
    kinds = [e["kind"] for e in written]
    assert kinds[0] == "STARTED" and set(kinds[1:]) == {"HEARTBEAT"}
    assert 4 <= kinds.count("HEARTBEAT") <= 8, kinds  # ~1.2 s at 0.2 s, one of them the handler's
    assert reported == [True] and [e["progress"] for e in written].count("half") == 1
    assert {e["attempt_token"] for e in written} == {ctx.attempt_token}
    assert outcome is not None and outcome["kind"] == "SUCCEEDED"
    count = len(written)
    time.sleep(0.5)
    assert len(written) == count, "no heartbeat after the outcome"
    assert not ctx.heartbeat(), "no renewal once the handler returned"


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
