"""The scheduler's side of attempts, driven by attempt events on the real broker.

The worker SDK has tests of its own; here the events are produced directly so
that each engine rule (fencing by token, retries, dead letters, overlap
policies, lost attempts, re-run) is checked in isolation.
"""
from __future__ import annotations

import math
import time

import pytest
from engine_harness import TOPOLOGY, FakeWorker, SchedulerProcess, TopicReader, ensure_layout, occurrence_topics, soon

from scheduler.control.client import SchedulerClient, make_spec

TENANT = "jobs"


@pytest.fixture
def env(kafka_bootstrap, unique_prefix, tmp_path):
    ensure_layout(kafka_bootstrap, unique_prefix, [TENANT])
    process = SchedulerProcess(kafka_bootstrap, unique_prefix, tmp_path / "state", "a", ("--horizon", "3")).start()
    client = SchedulerClient(kafka_bootstrap, unique_prefix, timeout_s=60)
    occurrences = TopicReader(kafka_bootstrap, occurrence_topics(unique_prefix, [TENANT]), "Occurrence")
    yield process, client, occurrences, FakeWorker(kafka_bootstrap, unique_prefix)
    client.close()
    occurrences.close()
    if process.alive():
        process.terminate()


def of(reader: TopicReader, schedule_id: str) -> list[dict]:
    return [r.record for r in reader.received if r.record["schedule_id"] == schedule_id]


def wait_for(reader: TopicReader, schedule_id: str, count: int, timeout: float = 20) -> list[dict]:
    reader.until(lambda got: len([r for r in got if r.record["schedule_id"] == schedule_id]) >= count, timeout)
    found = of(reader, schedule_id)
    assert len(found) >= count, f"expected {count} records of {schedule_id}, got {len(found)}"
    return found


def latest_status(bootstrap: str, prefix: str, occurrence_id: str, settled=lambda status: True,
                  timeout_s: float = 30) -> dict:
    """The occurrence's latest recorded status, read until `settled(status)` holds or the deadline passes."""
    reader = TopicReader(bootstrap, [TOPOLOGY.topic_name("occurrence-status-changelog", prefix)], "OccurrenceStatus")
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            reader.poll(0.5)
            states = [r.record for r in reader.received if r.record["occurrence_id"] == occurrence_id]
            if (states and settled(states[-1])) or time.monotonic() > deadline:
                break
    finally:
        reader.close()
    assert states, f"no status recorded for {occurrence_id}"
    return states[-1]


def test_retryable_failures_are_retried_with_the_same_id_and_backoff_until_success(env, kafka_bootstrap,
                                                                                  unique_prefix):
    process, client, occurrences, worker = env
    client.create(TENANT, make_spec("once", soon(), max_attempts=3, retry_backoff_ms=400), schedule_id="flaky")
    first = wait_for(occurrences, "flaky", 1)[0]
    worker.run(first, "FAILED", retryable=True, error_class="Timeout", error_message="upstream slow")
    second = wait_for(occurrences, "flaky", 2)[1]
    worker.run(second, "FAILED", retryable=True, error_class="Timeout", error_message="again")
    third = wait_for(occurrences, "flaky", 3)[2]
    worker.run(third, "SUCCEEDED")
    assert [o["attempt"] for o in (first, second, third)] == [1, 2, 3]
    assert {o["occurrence_id"] for o in (first, second, third)} == {first["occurrence_id"]}
    stamps = {r.record["attempt"]: r.timestamp_ms for r in occurrences.received
              if r.record["schedule_id"] == "flaky"}
    assert stamps[2] > stamps[1] and stamps[3] > stamps[2]
    status = latest_status(kafka_bootstrap, unique_prefix, first["occurrence_id"],
                           lambda status: status["state"] == "SUCCEEDED")
    assert status["state"] == "SUCCEEDED" and status["attempt"] == 3
    assert [e["kind"] for e in status["attempts"]] == ["STARTED", "FAILED"] * 2 + ["STARTED", "SUCCEEDED"]


def test_a_permanent_failure_goes_to_the_dead_letters_and_rerun_brings_it_back_with_the_same_id(
        env, kafka_bootstrap, unique_prefix):
    process, client, occurrences, worker = env
    client.create(TENANT, make_spec("once", soon(), max_attempts=5), schedule_id="broken")
    first = wait_for(occurrences, "broken", 1)[0]
    worker.run(first, "FAILED", retryable=False, error_class="ValueError", error_message="bad parameters")
    dead = TopicReader(kafka_bootstrap, [TOPOLOGY.topic_name("dead-letters", unique_prefix, tenant=TENANT)],
                       "DeadLetter")
    try:
        letters = dead.until(lambda got: len(got) >= 1, timeout=20)
    finally:
        dead.close()
    assert len(letters) == 1
    letter = letters[0].record
    assert letter["occurrence"]["occurrence_id"] == first["occurrence_id"]
    assert "permanent" in letter["reason"] and [e["kind"] for e in letter["history"]] == ["STARTED", "FAILED"]
    occurrences.poll(2)
    assert len(of(occurrences, "broken")) == 1, "a permanent failure must not be retried"

    assert client.rerun(TENANT, first["occurrence_id"], schedule_id="broken")["status"] == "ACCEPTED"
    again = wait_for(occurrences, "broken", 2)[1]
    assert again["occurrence_id"] == first["occurrence_id"] and again["attempt"] == 2


def test_a_result_with_a_superseded_token_changes_nothing(env, kafka_bootstrap, unique_prefix):
    process, client, occurrences, worker = env
    client.create(TENANT, make_spec("once", soon(), max_attempts=3, retry_backoff_ms=200), schedule_id="fenced")
    first = wait_for(occurrences, "fenced", 1)[0]
    worker.send(first, "STARTED", "old-token")
    worker.send(first, "STARTED", "new-token")
    worker.send(first, "FAILED", "old-token", retryable=True, error_class="Zombie", error_message="late result")
    occurrences.poll(2)
    assert len(of(occurrences, "fenced")) == 1, "a stale token's failure triggered a retry"
    worker.send(first, "SUCCEEDED", "new-token")
    assert latest_status(kafka_bootstrap, unique_prefix, first["occurrence_id"],
                         lambda status: status["state"] == "SUCCEEDED")["state"] == "SUCCEEDED"


def every_second(**fields) -> dict:
    return make_spec("rate", "every 1s", anchor_at_ms=math.floor(time.time()) * 1000, **fields)


def test_skip_if_running_never_dispatches_while_one_runs_and_records_the_skips(env, kafka_bootstrap,
                                                                              unique_prefix):
    process, client, occurrences, worker = env
    events = TopicReader(kafka_bootstrap, [TOPOLOGY.topic_name("occurrence-events", unique_prefix)],
                         "OccurrenceEvent")
    client.create(TENANT, every_second(overlap_policy="SKIP_IF_RUNNING"), schedule_id="slow")
    first = wait_for(occurrences, "slow", 1)[0]
    worker.send(first, "STARTED", "t1")
    occurrences.poll(4)
    assert len(of(occurrences, "slow")) == 1, "dispatched while the previous occurrence was running"
    worker.send(first, "SUCCEEDED", "t1")
    wait_for(occurrences, "slow", 2)
    skipped = [e.record for e in events.poll(1) if e.record["schedule_id"] == "slow"]
    events.close()
    assert len([e for e in skipped if e["kind"] == "SKIPPED_OVERLAP"]) >= 2


def test_queue_one_keeps_at_most_one_waiting_and_releases_it_when_the_running_one_ends(env):
    process, client, occurrences, worker = env
    client.create(TENANT, every_second(overlap_policy="QUEUE_ONE", max_lateness_ms=60_000), schedule_id="q1")
    first = wait_for(occurrences, "q1", 1)[0]
    worker.send(first, "STARTED", "t1")
    occurrences.poll(4)
    assert len(of(occurrences, "q1")) == 1
    worker.send(first, "SUCCEEDED", "t1")
    second = wait_for(occurrences, "q1", 2)[1]
    assert second["scheduled_for_ms"] == first["scheduled_for_ms"] + 1000, "the waiting one is the next fire"


def test_an_attempt_silent_past_its_run_timeout_is_lost_and_stops_blocking(env):
    process, client, occurrences, worker = env
    client.create(TENANT, every_second(overlap_policy="SKIP_IF_RUNNING", run_timeout_ms=3000), schedule_id="lost")
    first = wait_for(occurrences, "lost", 1)[0]
    worker.send(first, "STARTED", "crashed-worker")
    found = wait_for(occurrences, "lost", 2, timeout=15)
    assert found[1]["scheduled_for_ms"] - first["scheduled_for_ms"] >= 3000


def test_an_undecodable_attempt_event_is_reported_with_its_position_and_processing_goes_on(
        env, kafka_bootstrap, unique_prefix):
    process, client, occurrences, worker = env
    events = TopicReader(kafka_bootstrap, [TOPOLOGY.topic_name("occurrence-events", unique_prefix)],
                         "OccurrenceEvent")
    worker.producer.produce(worker.topic, b"\xc3\x01garbage", b"after")
    worker.producer.flush(10)
    client.create(TENANT, make_spec("once", soon(), max_attempts=1), schedule_id="after")
    first = wait_for(occurrences, "after", 1)[0]
    worker.run(first, "FAILED", retryable=True, error_class="Boom", error_message="x")
    try:
        found = events.until(lambda got: any(e.record["kind"] == "REJECTED_INPUT" for e in got), timeout=20)
    finally:
        events.close()
    rejected = [e.record for e in found if e.record["kind"] == "REJECTED_INPUT"]
    assert len(rejected) == 1 and rejected[0]["reason"].startswith(f"{worker.topic}/")
    assert latest_status(kafka_bootstrap, unique_prefix, first["occurrence_id"],
                         lambda status: status["state"] == "DEAD")["state"] == "DEAD"
