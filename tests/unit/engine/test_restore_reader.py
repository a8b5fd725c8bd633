"""RestoreReader: the restores of newly assigned partitions, over one read_committed consumer, a slice at a time.

Proves what scheduler/engine/restore_reader.py promises, against changelogs in memory (changelog_fakes.py) instead of
a broker: the log bounds of all partitions come from one request per bound; each restore starts at its store's
checkpoint (never before the log's first offset) and reads to the high watermark, past the final commit
marker, not to the end read_committed shows while a transaction is open; a partition done is checkpointed,
unassigned and returned while the others go on; a dropped one claims exactly what it applied. The stores are
real RocksDB stores under tmp_path.
"""
from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from changelog_fakes import ChangelogConsumer, Changelogs, OffsetsAdmin
from task_builder import CODEC, TOPICS

from scheduler.engine import restore_reader
from scheduler.engine.partition_store import PartitionStore
from scheduler.engine.restore_reader import RestoreReader, restore_partition
from scheduler.engine.timeline_keys import WAKE_HEADER

CHANGELOGS = dict(TOPICS.changelogs)
SCHEDULES, ADMISSIONS, OCCURRENCES = CHANGELOGS["schedules"], CHANGELOGS["admissions"], CHANGELOGS["occurrences"]


@dataclass
class Cluster:
    logs: Changelogs
    consumer: ChangelogConsumer
    admin: OffsetsAdmin
    consumer_confs: list[dict[str, Any]]
    tmp: Path
    stores: list[PartitionStore] = field(default_factory=list)

    def store(self, partition: int) -> PartitionStore:
        store = PartitionStore(self.tmp / f"p{partition}")
        self.stores.append(store)
        return store

    def reader(self, timeout_s: float = 120.0) -> RestoreReader:
        return RestoreReader({"bootstrap.servers": "unused:9092"}, CHANGELOGS, CODEC, timeout_s=timeout_s)


@pytest.fixture
def cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Cluster]:
    logs = Changelogs()
    fake = Cluster(logs, ChangelogConsumer(logs), OffsetsAdmin(logs), [], tmp_path)

    def consumer(conf: dict[str, Any]) -> ChangelogConsumer:
        fake.consumer_confs.append(conf)
        return fake.consumer

    monkeypatch.setattr(restore_reader, "Consumer", consumer)
    monkeypatch.setattr(restore_reader, "AdminClient", lambda conf: fake.admin)
    yield fake
    for store in fake.stores:
        store.close()


def run(reader: RestoreReader) -> list[int]:
    """Step until every restore is done; the partitions in the order they finished."""
    finished: list[int] = []
    for _ in range(100):
        if not reader.restores:
            return finished
        finished += reader.step(time.monotonic() + 10)
    raise AssertionError(f"restores {sorted(reader.restores)} never finished")


def test_a_restore_applies_every_record_and_checkpoints_the_high_watermark_past_the_commit_marker(
        cluster: Cluster) -> None:
    admissions = cluster.logs[(ADMISSIONS, 0)]
    admissions.append(b"a1", b"v1")
    admissions.append(b"a2", b"v2")
    admissions.append(b"a1", None, marker=True)  # a tombstone, then its transaction's commit marker
    cluster.logs[(SCHEDULES, 0)].append(b"s1", b"state", [(WAKE_HEADER, b"wake-s1")], marker=True)
    store = cluster.store(0)
    reader = cluster.reader()
    started = reader.begin({0: store})
    assert started[0].remaining == 6
    assert run(reader) == [0]
    assert store.get("admissions", b"a1") is None and store.get("admissions", b"a2") == b"v2"
    assert store.get("schedules", b"s1") == b"state" and store.get("timeline", b"wake-s1") == b""
    assert store.changelog_offset("admissions") == 4 and store.changelog_offset("schedules") == 2
    assert started[0].applied == {"schedules": 1, "timeline": 0, "occurrences": 0, "admissions": 3}
    assert cluster.consumer.unassigns == [[(SCHEDULES, 0), (ADMISSIONS, 0)]]
    conf = cluster.consumer_confs[0]
    assert conf["isolation.level"] == "read_committed" and conf["enable.partition.eof"] is True


def test_all_partitions_bounds_come_in_one_request_per_bound_and_only_changelogs_with_records_are_read(
        cluster: Cluster) -> None:
    cluster.logs[(ADMISSIONS, 0)].append(b"a", b"1")
    cluster.logs[(OCCURRENCES, 1)].append(b"o", b"1")
    reader = cluster.reader()
    reader.begin({0: cluster.store(0), 1: cluster.store(1)})
    every = sorted((topic, p) for topic in CHANGELOGS.values() for p in (0, 1))
    assert cluster.admin.requests == [every, every]  # earliest, then latest: two requests in all
    assert cluster.consumer.assigns == [[(ADMISSIONS, 0, 0), (OCCURRENCES, 1, 0)]]
    assert sorted(run(reader)) == [0, 1]


def test_a_restore_starts_at_its_checkpoint_or_the_first_offset_left_in_the_log(cluster: Cluster) -> None:
    for n in range(4):
        cluster.logs[(ADMISSIONS, 0)].append(f"a{n}".encode(), b"new")
    occurrences = cluster.logs[(OCCURRENCES, 0)]
    for n in range(5):
        occurrences.append(f"o{n}".encode(), b"kept")
    occurrences.low = 3  # the head was deleted by retention: the checkpoint at 1 is before it
    store = cluster.store(0)
    store.write({"admissions": {b"a0": b"old", b"a1": b"old"}}, {"admissions": 2, "occurrences": 1})
    reader = cluster.reader()
    started = reader.begin({0: store})
    assert cluster.consumer.assigns == [[(OCCURRENCES, 0, 3), (ADMISSIONS, 0, 2)]]
    run(reader)
    assert [store.get("admissions", f"a{n}".encode()) for n in range(4)] == [b"old", b"old", b"new", b"new"]
    assert store.get("occurrences", b"o2") is None and store.get("occurrences", b"o3") == b"kept"
    assert started[0].applied["admissions"] == 2 and started[0].applied["occurrences"] == 2


def test_an_open_transaction_holds_its_partition_back_while_another_finishes(cluster: Cluster) -> None:
    cluster.logs[(ADMISSIONS, 0)].append(b"a", b"1", marker=True)
    held = cluster.logs[(ADMISSIONS, 1)]
    held.append(b"before", b"1", marker=True)
    held.open_at = held.append(b"open", b"2")  # a previous owner's transaction, neither committed nor aborted
    s0, s1 = cluster.store(0), cluster.store(1)
    reader = cluster.reader()
    reader.begin({0: s0, 1: s1})
    assert reader.step(time.monotonic() + 10) == [0]
    assert reader.step(time.monotonic() + 10) == []
    assert sorted(reader.restores) == [1] and cluster.consumer.unassigns == [[(ADMISSIONS, 0)]]
    assert s0.changelog_offset("admissions") == 2 and s1.changelog_offset("admissions") == 0
    assert reader.restores[1].remaining == 1  # read_committed's end is at 2: the log's is at 3
    held.open_at = None  # committed (the marker it would write is not needed to end the log)
    assert run(reader) == [1]
    assert s1.get("admissions", b"open") == b"2" and s1.changelog_offset("admissions") == 3


def test_a_dropped_restore_claims_what_it_applied_and_is_read_no_more(cluster: Cluster) -> None:
    log = cluster.logs[(ADMISSIONS, 2)]
    log.append(b"a", b"1")
    log.open_at = log.append(b"b", b"2")
    store = cluster.store(2)
    reader = cluster.reader()
    reader.begin({2: store})
    reader.step(time.monotonic() + 10)
    dropped = reader.drop(2)
    assert dropped is not None and dropped.applied["admissions"] == 1
    assert store.changelog_offset("admissions") == 1 and store.get("admissions", b"a") == b"1"
    assert reader.restores == {} and cluster.consumer.unassigns == [[(ADMISSIONS, 2)]]
    assert reader.drop(2) is None


def test_a_slice_already_spent_reads_nothing(cluster: Cluster) -> None:
    cluster.logs[(ADMISSIONS, 0)].append(b"a", b"1")
    reader = cluster.reader()
    reader.begin({0: cluster.store(0)})
    assert reader.step(time.monotonic() - 1) == [] and cluster.consumer.consumes == 0
    assert reader.restores[0].remaining == 1


def test_restore_partition_restores_one_partition_in_one_go_and_closes_its_consumer(cluster: Cluster) -> None:
    cluster.consumer.per_fetch = 1  # one record a fetch: several steps
    for n in range(3):
        cluster.logs[(OCCURRENCES, 5)].append(f"o{n}".encode(), b"v")
    store = cluster.store(5)
    applied = restore_partition(store, {"bootstrap.servers": "unused:9092"}, CHANGELOGS, 5, CODEC)
    assert applied["occurrences"] == 3 and store.changelog_offset("occurrences") == 3
    assert cluster.consumer.closed and cluster.consumer.consumes >= 3
