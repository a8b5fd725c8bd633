"""Staged bursts on the real broker: produced ahead in an open transaction, visible at the instant, and
never lost when the process dies with the stage open (scheduler/engine/stage_policy.py)."""
from __future__ import annotations

import math
import time

import pytest
from engine_harness import (
    BURST_TENANTS,
    OPEN_STAGE_ARGS,
    PRODUCED,
    SchedulerProcess,
    TopicReader,
    create_burst,
    ensure_layout,
    occurrence_topics,
    wait_for_log,
)


@pytest.fixture
def staging_process(kafka_bootstrap, unique_prefix, tmp_path):
    ensure_layout(kafka_bootstrap, unique_prefix, BURST_TENANTS)
    process = SchedulerProcess(kafka_bootstrap, unique_prefix, tmp_path / "state", "a", OPEN_STAGE_ARGS).start()
    yield process
    if process.alive():
        process.terminate()


def test_a_burst_is_produced_ahead_invisibly_and_committed_at_its_instant(kafka_bootstrap, unique_prefix,
                                                                          staging_process):
    due_ms = (math.ceil(time.time()) + 45) * 1000  # a stage holds nothing before its produce window: lead freely
    expected = create_burst(kafka_bootstrap, unique_prefix, due_ms)
    topics = occurrence_topics(unique_prefix, BURST_TENANTS)
    committed = TopicReader(kafka_bootstrap, topics, "Occurrence")
    uncommitted = TopicReader(kafka_bootstrap, topics, "Occurrence", isolation="read_uncommitted")
    try:
        wait_for_log(staging_process, "staged 1450 occurrences", due_ms / 1000)
        assert PRODUCED not in staging_process.log_tail(400), "produced before its window"
        assert uncommitted.poll(0.5) == [], "a prepared stage writes nothing before its produce window"
        wait_for_log(staging_process, PRODUCED, due_ms / 1000)
        ahead = uncommitted.until(lambda got: len(got) >= 1450, timeout=max(0.1, due_ms / 1000 - time.time() - 0.5))
        assert time.time() * 1000 < due_ms, "the stage was not written ahead of its instant"
        assert len(ahead) == 1450 and {expected[r.record["occurrence_id"]] for r in ahead} == {"big", "small1",
                                                                                                 "small2"}
        assert committed.poll(max(0.0, due_ms / 1000 - time.time() - 0.3)) == [], "visible before the instant"
        committed.until(lambda got: len(got) >= len(expected), timeout=60)
        committed.poll(2.0)  # room for any duplicate to show
        got = committed.received
    finally:
        committed.close()
        uncommitted.close()
    assert sorted(r.record["occurrence_id"] for r in got) == sorted(expected), staging_process.log_tail()
    assert min(r.seen_ms for r in got) >= due_ms
    staged = [r for r in got if expected[r.record["occurrence_id"]] != "guarded"]
    assert {r.timestamp_ms for r in staged} == {due_ms}, "a staged record carries its instant as timestamp"
    assert all(r.timestamp_ms >= due_ms for r in got)
    assert "committed the staged burst" in staging_process.log_tail(400)


def test_a_process_killed_with_its_stage_open_loses_nothing(kafka_bootstrap, unique_prefix, tmp_path):
    ensure_layout(kafka_bootstrap, unique_prefix, BURST_TENANTS)
    state = tmp_path / "state"
    # 1,450 stageable entries make a produce window of about 4 s: the kill lands with the transaction open.
    first = SchedulerProcess(kafka_bootstrap, unique_prefix, state, "a", OPEN_STAGE_ARGS).start()
    try:
        due_ms = (math.ceil(time.time()) + 25) * 1000
        expected = create_burst(kafka_bootstrap, unique_prefix, due_ms)
        wait_for_log(first, PRODUCED, due_ms / 1000)
        first.kill()
    finally:
        if first.alive():
            first.kill()
    assert time.time() * 1000 < due_ms, "the kill came after the instant"
    topics = occurrence_topics(unique_prefix, BURST_TENANTS)
    reader = TopicReader(kafka_bootstrap, topics, "Occurrence")
    second = SchedulerProcess(kafka_bootstrap, unique_prefix, state, "a", OPEN_STAGE_ARGS).start()
    try:
        got = reader.until(lambda got: len({r.record["occurrence_id"] for r in got}) >= len(expected), timeout=90)
        reader.poll(2.0)
    finally:
        reader.close()
        second.terminate()
    ids = [r.record["occurrence_id"] for r in reader.received]
    assert set(ids) == set(expected), second.log_tail()
    assert len(ids) == len(set(ids)), "the aborted stage's records must stay invisible"
    assert min(r.seen_ms for r in got) >= due_ms
    # The restart aborted the stage at once; left open it would hold the readers until its 20 s timeout.
    assert max(r.seen_ms for r in got) < due_ms + 30_000
