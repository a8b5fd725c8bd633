"""Restore on the real broker meets a transaction nobody has ended yet: it neither stops short silently (which
would start the partition on partial state) nor waits forever (docs/decisions/0002-staged-bursts.md)."""
from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Producer
from engine_harness import CODEC, TOPOLOGY, ensure_layout

from scheduler.engine.partition_store import PartitionStore
from scheduler.engine.restore_reader import RestoreReader, RestoreStalled, restore_partition

PARTITION = 3


def transactional(bootstrap: str) -> Producer:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"restore-test-{uuid.uuid4()}",
                         "transaction.timeout.ms": 60_000})
    producer.init_transactions(30)
    return producer


def write(producer: Producer, topic: str, key: bytes, value: bytes, commit: bool = True) -> None:
    producer.begin_transaction()
    producer.produce(topic, value, key, partition=PARTITION)
    producer.flush(10)
    if commit:
        producer.commit_transaction(30)


@pytest.fixture
def changelog_with_an_open_transaction(kafka_bootstrap: str, unique_prefix: str) -> tuple[str, Producer]:
    """committed `a`, then `b` in a transaction left open, then `c` committed by another producer after it."""
    ensure_layout(kafka_bootstrap, unique_prefix)
    topic = TOPOLOGY.topic_name("occurrence-status-changelog", unique_prefix)
    write(transactional(kafka_bootstrap), topic, b"a", b"1")
    left_open = transactional(kafka_bootstrap)
    write(left_open, topic, b"b", b"2", commit=False)
    write(transactional(kafka_bootstrap), topic, b"c", b"3")
    return topic, left_open


def test_restore_waits_for_an_open_transaction_and_gets_what_was_committed_after_it(
        kafka_bootstrap: str, changelog_with_an_open_transaction: tuple[str, Producer], tmp_path: Path) -> None:
    topic, left_open = changelog_with_an_open_transaction
    waits: list[float] = []
    aborter = threading.Timer(2.5, left_open.abort_transaction)
    store = PartitionStore(tmp_path / "p")
    try:
        started = time.monotonic()
        aborter.start()  # after the clock starts: on a loaded machine opening the store alone can take a second
        restore_partition(store, {"bootstrap.servers": kafka_bootstrap}, {"occurrences": topic}, PARTITION, CODEC,
                          timeout_s=30, on_wait=lambda topic, partition, seconds: waits.append(seconds))
        took = time.monotonic() - started
        assert store.get("occurrences", b"c") == b"3", "what was committed after the open transaction is restored"
        assert store.get("occurrences", b"a") == b"1"
        assert store.get("occurrences", b"b") is None, "the aborted transaction's record is never applied"
    finally:
        aborter.join()
        store.close()
    assert took >= 2.0, "the restore ended before the open transaction did"
    assert max(waits) >= 1.0 and waits[-1] == 0.0, "the wait is reported while it lasts and cleared after"


def test_restore_fails_loudly_when_the_open_transaction_outlasts_its_bound(
        kafka_bootstrap: str, changelog_with_an_open_transaction: tuple[str, Producer], tmp_path: Path) -> None:
    topic, left_open = changelog_with_an_open_transaction
    store = PartitionStore(tmp_path / "p")
    try:
        with pytest.raises(RestoreStalled, match="not started on partial state"):
            restore_partition(store, {"bootstrap.servers": kafka_bootstrap}, {"occurrences": topic}, PARTITION,
                              CODEC, timeout_s=3)
        assert store.get("occurrences", b"c") is None
        # a at offset 0, its commit marker at 1, the open transaction's b at 2
        assert store.changelog_offset("occurrences") <= 2, "the checkpoint never claims what lies past b"
    finally:
        left_open.abort_transaction()
        store.close()


def test_partitions_restored_together_one_dropped_midway_goes_on_from_its_checkpoint(
        kafka_bootstrap: str, unique_prefix: str, tmp_path: Path) -> None:
    """One reader restores two partitions at once; one is dropped (revoked) mid-restore: its checkpoint claims
    exactly what its store holds, and a later restore from that checkpoint reads only the rest."""
    ensure_layout(kafka_bootstrap, unique_prefix)
    topic = TOPOLOGY.topic_name("occurrence-status-changelog", unique_prefix)
    count = 60_000  # per partition: more than one fetch of the reader's holds (restore_reader.BATCH over both)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "linger.ms": 20})
    for partition in (1, 2):
        for n in range(count):
            while True:  # 120,000 records: more than the producer's queue holds while a busy broker lags
                try:
                    producer.produce(topic, b"v%d" % n, b"p%d-%06d" % (partition, n), partition=partition)
                    break
                except BufferError:
                    producer.poll(0.1)
            if n % 10_000 == 0:
                producer.poll(0)
    producer.flush(60)
    changelogs = {"occurrences": topic}
    stores = {p: PartitionStore(tmp_path / f"p{p}") for p in (1, 2)}
    reader = RestoreReader({"bootstrap.servers": kafka_bootstrap}, changelogs, CODEC, timeout_s=30)
    try:
        restores = reader.begin(stores)
        deadline = time.monotonic() + 60
        while not any(0 < r.applied["occurrences"] < count for r in reader.restores.values()):
            assert reader.restores and time.monotonic() < deadline, "no restore was ever seen midway"
            reader.step(time.monotonic() + 0.01)
        dropped = next(p for p, r in reader.restores.items() if 0 < r.applied["occurrences"] < count)
        kept = 3 - dropped
        reader.drop(dropped)
        while reader.restores:
            reader.step(time.monotonic() + 1.0)
        assert restores[kept].applied["occurrences"] == count
        claimed = stores[dropped].changelog_offset("occurrences")
        held = sum(1 for _ in stores[dropped].keys_from("occurrences", b"", b"\xff"))
        assert claimed == held == restores[dropped].applied["occurrences"], "the checkpoint claims what is held"
    finally:
        reader.close()
        for store in stores.values():
            store.close()
    store = PartitionStore(tmp_path / f"p{dropped}")
    try:
        again = restore_partition(store, {"bootstrap.servers": kafka_bootstrap}, changelogs, dropped, CODEC)
        assert again["occurrences"] == count - claimed, "the second restore went on from the checkpoint"
        assert sum(1 for _ in store.keys_from("occurrences", b"", b"\xff")) == count
        assert store.get("occurrences", b"p%d-%06d" % (dropped, count - 1)) == b"v%d" % (count - 1)
    finally:
        store.close()
