"""A real scheduler and real worker processes together: what issue 5 promises users."""
from __future__ import annotations

import math
import time

import pytest
from engine_harness import TOPOLOGY, TopicReader, soon
from worker_harness import attempt_reader, handled, kinds_by_occurrence, scheduler_with_workers, status_of

from helpers.waiting import wait_until
from scheduler.control.client import make_spec

TENANT = "e2e"


@pytest.fixture
def system(kafka_bootstrap, unique_prefix, tmp_path):
    with scheduler_with_workers(kafka_bootstrap, unique_prefix, tmp_path, TENANT) as running:
        yield running


def test_a_handler_failing_twice_then_succeeding_gets_three_attempts_with_one_occurrence_id(
        system, kafka_bootstrap, unique_prefix):
    client, worker, workdir = system
    worker("fails_twice")
    client.create(TENANT, make_spec("once", soon(3), max_attempts=5, retry_backoff_ms=500), schedule_id="flaky")
    wait_until(lambda: len(handled(workdir)) >= 3, 60, "three attempts")
    calls = handled(workdir)
    assert [c["attempt"] for c in calls] == [1, 2, 3]
    assert len({c["occurrence_id"] for c in calls}) == 1
    assert len({c["token"] for c in calls}) == 3, "each attempt has its own token"
    assert calls[1]["at"] > calls[0]["at"] and calls[2]["at"] > calls[1]["at"]
    reader = attempt_reader(kafka_bootstrap, unique_prefix)
    try:
        reader.until(lambda got: len(got) >= 6, 20)
    finally:
        reader.close()
    assert kinds_by_occurrence(reader)[calls[0]["occurrence_id"]] == ["STARTED", "FAILED"] * 2 + ["STARTED",
                                                                                                    "SUCCEEDED"]
    # The attempts topic holds the success before the engine has read it into the status view.
    wait_until(lambda: status_of(client, TENANT, calls[0]["occurrence_id"]).get("state") == "SUCCEEDED", 30,
             "SUCCEEDED in the status view")
    assert client.occurrence(TENANT, calls[0]["occurrence_id"])["attempt"] == 3


def test_a_permanent_error_is_dead_at_once_and_rerun_brings_it_back_with_the_same_id(
        system, kafka_bootstrap, unique_prefix):
    client, worker, workdir = system
    worker("by_payload")
    client.create(TENANT, make_spec("once", soon(3), payload=b"permanent", max_attempts=5), schedule_id="dead")
    dead = TopicReader(kafka_bootstrap, [TOPOLOGY.topic_name("dead-letters", unique_prefix, tenant=TENANT)],
                       "DeadLetter")
    try:
        letters = dead.until(lambda got: len(got) >= 1, 30)
    finally:
        dead.close()
    assert len(handled(workdir)) == 1, "a permanent error must not be retried"
    occurrence_id = letters[0].record["occurrence"]["occurrence_id"]
    client.rerun(TENANT, occurrence_id, schedule_id="dead")
    wait_until(lambda: len(handled(workdir)) >= 2, 30, "the re-run")
    rerun = handled(workdir)[1]
    assert rerun["occurrence_id"] == occurrence_id and rerun["attempt"] == 2


def test_an_occurrence_cancelled_after_enqueue_is_skipped_by_the_worker_which_says_so(
        system, kafka_bootstrap, unique_prefix):
    client, worker, workdir = system
    client.create(TENANT, make_spec("once", soon(2)), schedule_id="late-cancel")
    occurrences = TopicReader(kafka_bootstrap, [TOPOLOGY.topic_name("occurrences", unique_prefix, tenant=TENANT,
                                                                     priority="normal")], "Occurrence")
    try:
        enqueued = occurrences.until(lambda got: len(got) >= 1, 20)
    finally:
        occurrences.close()
    client.cancel(TENANT, "late-cancel")
    worker("record")
    reader = attempt_reader(kafka_bootstrap, unique_prefix)
    try:
        events = reader.until(lambda got: len(got) >= 1, 30)
    finally:
        reader.close()
    assert [e.record["kind"] for e in events] == ["SKIPPED_STALE"]
    assert events[0].record["occurrence_id"] == enqueued[0].record["occurrence_id"]
    assert handled(workdir) == [], "the handler ran a cancelled occurrence"


@pytest.mark.parametrize("policy", ["SKIP_IF_RUNNING", "QUEUE_ONE"])
def test_a_handler_slower_than_its_period_never_runs_twice_at_once(system, kafka_bootstrap, unique_prefix, policy):
    client, worker, workdir = system
    worker("slow")
    anchor_ms = math.floor(time.time()) * 1000
    client.create(TENANT, make_spec("rate", "every 1s", anchor_at_ms=anchor_ms, overlap_policy=policy,
                                    max_lateness_ms=30_000), schedule_id="slow")
    wait_until(lambda: len(handled(workdir)) >= 3, 40, "three runs")
    client.pause(TENANT, "slow")
    runs = sorted(handled(workdir), key=lambda c: c["started"])
    for before, after in zip(runs, runs[1:], strict=False):
        assert after["started"] >= before["ended"] - 0.05, "two runs overlapped"
    events = TopicReader(kafka_bootstrap, [TOPOLOGY.topic_name("occurrence-events", unique_prefix)],
                         "OccurrenceEvent")
    try:
        events.poll(2)
    finally:
        events.close()
    skipped = [e.record for e in events.received if e.record["kind"] == "SKIPPED_OVERLAP"]
    assert skipped, "fires during a run must be recorded SKIPPED_OVERLAP"
    if policy == "QUEUE_ONE":
        gaps = [after["started"] - before["ended"] for before, after in zip(runs, runs[1:], strict=False)]
        assert min(gaps) < 1.0, "the queued occurrence starts as soon as the running one ends"
