"""Incremental rebalancing and restores off the rebalance path, with real processes on the real broker
(scheduler/engine/assignment.py): a join moves only what must move, and a restore interrupted by a
revocation or a kill -9 is finished correctly by the next owner."""
from __future__ import annotations

import math
import time
import uuid
from collections import Counter
from datetime import datetime, timezone

from confluent_kafka import Producer
from engine_harness import (
    TOPOLOGY,
    SchedulerProcess,
    TopicReader,
    ensure_layout,
    occurrence_topics,
    percentile,
    rfc3339,
    wait_for_log,
    wait_for_split,
)

from scheduler.control.client import SchedulerClient, make_spec
from scheduler.timing.occurrence_id import occurrence_id
from scheduler.wire.partitioning import partition_for

TENANT = "steady"
PARTITIONS = TOPOLOGY.schedule_partitions


def load_stream(bootstrap: str, prefix: str, count: int, start_ms: int, spread_ms: int) -> dict[str, int]:
    """`count` strict one-shots due evenly over [start, start + spread); occurrence_id -> due ms."""
    expected: dict[str, int] = {}
    with SchedulerClient(bootstrap, prefix, timeout_s=120) as client:
        ids = []
        for n in range(count):
            due_ms = start_ms + (n * spread_ms) // count
            sid = f"s-{n:05d}"
            ids.append(client.send("CREATE", sid, TENANT, spec=make_spec("once", rfc3339(due_ms))))
            expected[occurrence_id(sid, 1, datetime.fromtimestamp(due_ms / 1000, tz=timezone.utc))] = due_ms
        results = client.wait(ids, timeout_s=120)
    assert {r["status"] for r in results.values()} == {"ACCEPTED"}
    return expected


def test_a_join_moves_only_what_must_move_and_the_rest_keeps_dispatching(kafka_bootstrap, unique_prefix,
                                                                           tmp_path):
    ensure_layout(kafka_bootstrap, unique_prefix, [TENANT])
    first = SchedulerProcess(kafka_bootstrap, unique_prefix, tmp_path / "a", "a").start()
    start_ms = (math.ceil(time.time()) + 25) * 1000
    expected = load_stream(kafka_bootstrap, unique_prefix, 400, start_ms, 40_000)
    reader = TopicReader(kafka_bootstrap, occurrence_topics(unique_prefix, [TENANT]), "Occurrence")
    second = None
    try:
        while time.time() * 1000 < start_ms + 10_000:
            reader.poll(0.5)
        joined_ms = int(time.time() * 1000)
        second = SchedulerProcess(kafka_bootstrap, unique_prefix, tmp_path / "b", "b").start()
        wait_for_split([first, second], PARTITIONS, timeout=90)
        reader.until(lambda got: {r.record["occurrence_id"] for r in got} >= expected.keys(),
                     timeout=max(0.0, (start_ms + 40_000) / 1000 - time.time()) + 60)
        reader.poll(2.0)
        # Read before the processes stop: leaving the group revokes everything.
        stayed, moved, given_up = first.owned_partitions(), second.owned_partitions(), first.revoked_count()
        assert second.revoked_count() == 0
    finally:
        reader.close()
        for process in (first, second):
            if process is not None:
                process.terminate()
    counts = Counter(r.record["occurrence_id"] for r in reader.received)
    assert counts.keys() == expected.keys() and set(counts.values()) == {1}, "every occurrence exactly once"
    # The first owned every partition before the join and the split is whole and disjoint (wait_for_split): so
    # it gave up at least what moved, and having given up no more partitions than that, exactly what moved.
    assert stayed and moved and given_up == len(moved), "the first process gave up exactly what moved, nothing else"
    lags: dict[bool, list[int]] = {True: [], False: []}
    for item in reader.received:
        record = item.record
        if record["scheduled_for_ms"] >= joined_ms:
            partition = partition_for(record["schedule_id"].encode(), PARTITIONS)
            lags[partition in stayed].append(item.timestamp_ms - record["scheduled_for_ms"])
    print(f"join at +{(joined_ms - start_ms) / 1000:.1f} s; staying partitions {sorted(stayed)}: "
          f"{len(lags[True])} occurrences, lag p50 {percentile(lags[True], 0.5)} ms, max {max(lags[True])} ms; "
          f"moved {sorted(moved)}: lag max {max(lags[False])} ms")
    assert max(lags[True]) < 5_000, "a partition that did not move stopped dispatching during the join"


def open_transactions(bootstrap: str, topic: str) -> Producer:
    """A transaction left open on every partition of `topic`: restores of those partitions wait at it."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"rebalance-test-{uuid.uuid4()}",
                         "transaction.timeout.ms": 300_000})
    producer.init_transactions(30)
    producer.begin_transaction()
    for partition in range(PARTITIONS):
        producer.produce(topic, b"never committed", b"held", partition=partition)
    producer.flush(30)
    return producer


def test_a_restore_revoked_midway_or_killed_is_finished_by_the_next_owner(kafka_bootstrap, unique_prefix, tmp_path):
    """The first process restores from scratch and is held at an open transaction on every changelog partition:
    a second joins and takes half of them mid-restore; it is killed -9 while restoring them, restarted with the
    same instance id, and the transaction is aborted: every occurrence comes out, once."""
    ensure_layout(kafka_bootstrap, unique_prefix, [TENANT])
    loader = SchedulerProcess(kafka_bootstrap, unique_prefix, tmp_path / "loader", "loader").start()
    start_ms = (math.ceil(time.time()) + 150) * 1000
    expected = load_stream(kafka_bootstrap, unique_prefix, 300, start_ms, 3_000)
    assert loader.terminate() == 0
    held = open_transactions(kafka_bootstrap, TOPOLOGY.topic_name("schedules", unique_prefix))
    first = SchedulerProcess(kafka_bootstrap, unique_prefix, tmp_path / "a", "a").start()
    second = None
    reader = TopicReader(kafka_bootstrap, occurrence_topics(unique_prefix, [TENANT]), "Occurrence")
    try:
        wait_for_log(first, "a transaction of a previous owner is still open", time.time() + 120)
        second = SchedulerProcess(kafka_bootstrap, unique_prefix, tmp_path / "b", "b").start()
        wait_for_log(first, "dropped: revoked", time.time() + 120)
        wait_for_log(second, "a transaction of a previous owner is still open", time.time() + 120)
        second.kill()
        held.abort_transaction(30)
        second = SchedulerProcess(kafka_bootstrap, unique_prefix, tmp_path / "b", "b").start()
        assert time.time() * 1000 < start_ms, "the setup took longer than the lead time"
        reader.until(lambda got: {r.record["occurrence_id"] for r in got} >= expected.keys(),
                     timeout=max(0.0, start_ms / 1000 - time.time()) + 60)
        reader.poll(2.0)
        logs = first.log_tail(400) + second.log_tail(400)
    finally:
        reader.close()
        for process in (first, second):
            if process is not None and process.alive():
                process.terminate()
    counts = Counter(r.record["occurrence_id"] for r in reader.received)
    missing = expected.keys() - counts.keys()
    assert not missing, f"{len(missing)} occurrences lost:\n{logs}"
    assert counts.keys() == expected.keys() and set(counts.values()) == {1}, "every occurrence exactly once"
