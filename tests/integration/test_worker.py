"""`scheduler worker` processes on the real broker: attempts recorded, offsets committed after them,
stale work skipped, higher priorities first, and a kill -9 redelivery kept single by `once`."""
from __future__ import annotations

import sqlite3

import pytest
from worker_harness import (
    TOPOLOGY,
    WorkerProcess,
    attempt_partitions,
    attempt_reader,
    create_layout,
    enqueue,
    handled,
    kinds_by_occurrence,
    occurrence,
    publish_states,
    schedule_state,
)

from helpers.waiting import wait_until
from scheduler.wire.partitioning import partition_for

pytestmark = pytest.mark.integration
TENANT = "acme"


@pytest.fixture
def layout(kafka_bootstrap: str, unique_prefix: str) -> str:
    create_layout(kafka_bootstrap, unique_prefix, TENANT)
    return unique_prefix


@pytest.fixture
def workers():
    started: list[WorkerProcess] = []
    yield started
    for worker in started:
        worker.stop_quietly()


def test_success_is_recorded_then_committed_so_a_restarted_worker_does_not_rerun_it(
        kafka_bootstrap, layout, tmp_path, workers):
    first = [occurrence("s1", TENANT), occurrence("s2", TENANT, minute=1)]
    enqueue(kafka_bootstrap, layout, first)
    reader = attempt_reader(kafka_bootstrap, layout)
    worker = WorkerProcess(kafka_bootstrap, layout, TENANT, "worker_handlers:record", tmp_path)
    workers.append(worker.start())
    def done(ids):
        return lambda got: sum(r.record["kind"] == "SUCCEEDED" and r.record["occurrence_id"] in ids
                               for r in got) >= len(ids)
    reader.until(done({o["occurrence_id"] for o in first}), timeout=30)
    assert worker.terminate() == 0, worker.log_tail()

    second = occurrence("s3", TENANT, minute=2)
    enqueue(kafka_bootstrap, layout, [second])
    workers.append(WorkerProcess(kafka_bootstrap, layout, TENANT, "worker_handlers:record", tmp_path).start())
    reader.until(done({second["occurrence_id"]}), timeout=30)
    reader.poll(1.0)  # anything a wrongly uncommitted offset would replay arrives with it
    reader.close()

    ran = [h["occurrence_id"] for h in handled(tmp_path)]
    assert sorted(ran) == sorted(o["occurrence_id"] for o in [*first, second])
    assert kinds_by_occurrence(reader) == {o["occurrence_id"]: ["STARTED", "SUCCEEDED"] for o in [*first, second]}
    calls = {h["occurrence_id"]: h for h in handled(tmp_path)}
    for item in reader.received:
        event = item.record
        assert event["attempt_token"] == calls[event["occurrence_id"]]["token"]
        assert event["attempt"] == 1 and event["tenant"] == TENANT and event["schedule_version"] == 1
        assert event["worker_id"] and event["error_class"] is None
    assert calls[first[0]["occurrence_id"]]["scheduled_for"] == "2026-01-01T00:00:00+00:00"


def test_attempt_events_are_keyed_by_schedule_id_on_the_java_partition(kafka_bootstrap, layout, tmp_path, workers):
    occurrences = [occurrence(f"sched-{n}", TENANT) for n in range(12)]
    enqueue(kafka_bootstrap, layout, occurrences)
    workers.append(WorkerProcess(kafka_bootstrap, layout, TENANT, "worker_handlers:record", tmp_path).start())
    seen = attempt_partitions(kafka_bootstrap, layout, expected=24)
    assert len(seen) == 24
    assert {key for key, _ in seen} == {o["schedule_id"] for o in occurrences}
    for key, partition in seen:
        assert partition == partition_for(key.encode(), TOPOLOGY.schedule_partitions)


def test_failures_are_recorded_as_retryable_or_permanent_and_never_retried_by_the_worker(
        kafka_bootstrap, layout, tmp_path, workers):
    cases = {"retryable": (True, "scheduler.worker.errors.RetryableError", "upstream answered 503"),
             "permanent": (False, "scheduler.worker.errors.PermanentError", "invalid account number"),
             "unexpected": (True, "KeyError", "'missing'")}
    occurrences = {payload: occurrence(f"fail-{payload}", TENANT, payload=payload.encode(), attempt=2)
                   for payload in cases}
    enqueue(kafka_bootstrap, layout, list(occurrences.values()))
    reader = attempt_reader(kafka_bootstrap, layout)
    workers.append(WorkerProcess(kafka_bootstrap, layout, TENANT, "worker_handlers:by_payload", tmp_path).start())
    reader.until(lambda got: sum(r.record["kind"] == "FAILED" for r in got) >= 3, timeout=30)
    reader.poll(1.5)
    reader.close()

    assert kinds_by_occurrence(reader) == {o["occurrence_id"]: ["STARTED", "FAILED"] for o in occurrences.values()}
    assert len(handled(tmp_path)) == 3
    for payload, (retryable, error_class, message) in cases.items():
        [failed] = [r.record for r in reader.received
                    if r.record["kind"] == "FAILED" and r.record["occurrence_id"] == occurrences[payload]["occurrence_id"]]
        assert (failed["retryable"], failed["error_class"], failed["error_message"]) == (retryable, error_class, message)
        assert failed["attempt"] == 2


def test_stale_or_cancelled_occurrences_are_skipped_before_the_handler_runs(
        kafka_bootstrap, layout, tmp_path, workers):
    updated, cancelled, paused, unseen, current = (occurrence(s, TENANT) for s in
                                                   ("updated", "cancelled", "paused", "unseen", "current"))
    enqueue(kafka_bootstrap, layout, [updated, cancelled, paused, unseen, current])
    # The schedules changed after their occurrences were enqueued, before any worker took them.
    publish_states(kafka_bootstrap, layout, [
        schedule_state("updated", TENANT, 2, "ACTIVE"),
        schedule_state("cancelled", TENANT, 2, "CANCELED"),
        schedule_state("paused", TENANT, 1, "PAUSED"),
        schedule_state("current", TENANT, 1, "ACTIVE"),
    ])
    reader = attempt_reader(kafka_bootstrap, layout)
    workers.append(WorkerProcess(kafka_bootstrap, layout, TENANT, "worker_handlers:record", tmp_path).start())
    reader.until(lambda got: len(got) >= 7, timeout=30)
    reader.poll(1.0)
    reader.close()

    assert kinds_by_occurrence(reader) == {
        updated["occurrence_id"]: ["SKIPPED_STALE"], cancelled["occurrence_id"]: ["SKIPPED_STALE"],
        paused["occurrence_id"]: ["SKIPPED_STALE"],
        unseen["occurrence_id"]: ["STARTED", "SUCCEEDED"], current["occurrence_id"]: ["STARTED", "SUCCEEDED"],
    }
    assert sorted(h["occurrence_id"] for h in handled(tmp_path)) == sorted([unseen["occurrence_id"],
                                                                            current["occurrence_id"]])
    reasons = {r.record["schedule_id"]: r.record["error_message"] for r in reader.received
               if r.record["kind"] == "SKIPPED_STALE"}
    assert "version 2" in reasons["updated"] and "version 1" in reasons["updated"]
    assert "CANCELED" in reasons["cancelled"]
    assert reasons["paused"] == "schedule is PAUSED"


def test_higher_priorities_run_first(kafka_bootstrap, layout, tmp_path, workers):
    queued = [occurrence(f"{priority.lower()}-{n}", TENANT, priority=priority, minute=n)
              for priority in ("LOW", "NORMAL", "HIGH") for n in range(4)]
    enqueue(kafka_bootstrap, layout, queued)
    workers.append(WorkerProcess(kafka_bootstrap, layout, TENANT, "worker_handlers:record", tmp_path).start())
    wait_until(lambda: len(handled(tmp_path)) >= len(queued), timeout=30, what="every occurrence handled")
    order = [h["priority"] for h in handled(tmp_path)]
    assert order == ["high"] * 4 + ["normal"] * 4 + ["low"] * 4


def test_high_priority_work_arriving_while_low_priority_work_waits_runs_next(
        kafka_bootstrap, layout, tmp_path, workers):
    # One schedule's occurrences share a partition, so they keep their order; occurrences of different
    # partitions (and so of different schedules) have none among themselves, only their priorities do.
    lows = [occurrence("low", TENANT, priority="LOW", minute=n, payload=b"slow" if n == 0 else b"")
            for n in range(4)]
    enqueue(kafka_bootstrap, layout, lows)
    workers.append(WorkerProcess(kafka_bootstrap, layout, TENANT, "worker_handlers:record", tmp_path).start())
    wait_until(lambda: handled(tmp_path), timeout=30, what="the first low-priority occurrence to start")
    assert [h["occurrence_id"] for h in handled(tmp_path)] == [lows[0]["occurrence_id"]]
    enqueue(kafka_bootstrap, layout, [occurrence(f"high-{n}", TENANT, priority="HIGH") for n in range(2)])
    wait_until(lambda: len(handled(tmp_path)) >= 6, timeout=30, what="every occurrence handled")
    order = [h["occurrence_id"] for h in handled(tmp_path)]
    assert order[0] == lows[0]["occurrence_id"]
    assert {o.split("/")[0] for o in order[1:3]} == {"high-0", "high-1"}
    assert order[3:] == [o["occurrence_id"] for o in lows[1:]]


def test_worker_killed_after_its_side_effect_gets_the_occurrence_again_and_once_keeps_it_single(
        kafka_bootstrap, layout, tmp_path, workers):
    db = sqlite3.connect(tmp_path / "effects.db")
    db.execute("CREATE TABLE effects (occurrence_id TEXT NOT NULL, pid INTEGER NOT NULL)")
    db.commit()
    from scheduler.worker import ensure_table
    ensure_table(db)
    occ = occurrence("payments", TENANT)
    enqueue(kafka_bootstrap, layout, [occ])
    reader = attempt_reader(kafka_bootstrap, layout)

    doomed = WorkerProcess(kafka_bootstrap, layout, TENANT, "worker_handlers:sqlite_effect", tmp_path,
                           env={"WORKER_TEST_HANG_AFTER_EFFECT": "1"})
    workers.append(doomed.start())
    wait_until(lambda: len(handled(tmp_path)) == 1, timeout=30, what="the side effect of the first delivery")
    doomed.kill()

    workers.append(WorkerProcess(kafka_bootstrap, layout, TENANT, "worker_handlers:sqlite_effect", tmp_path).start())
    reader.until(lambda got: any(r.record["kind"] == "SUCCEEDED" for r in got), timeout=40)
    reader.close()

    calls = handled(tmp_path)
    assert [c["fresh"] for c in calls] == [True, False]
    assert calls[0]["pid"] != calls[1]["pid"]
    assert db.execute("SELECT COUNT(*) FROM effects").fetchone()[0] == 1
    assert db.execute("SELECT COUNT(*) FROM scheduler_processed_occurrences").fetchone()[0] == 1
    events = [(r.record["kind"], r.record["attempt_token"]) for r in sorted(reader.received, key=lambda r: r.record["at_ms"])]
    assert [kind for kind, _ in events] == ["STARTED", "STARTED", "SUCCEEDED"]
    assert events[0][1] != events[1][1] == events[2][1]
    db.close()
