"""PartitionRestore: what one fetch's changelog records write into a partition's stores, and when it gives up.

Proves what scheduler/engine/partition_restore.py promises, one `advance` at a time with real confluent_kafka
Messages and a real RocksDB store under tmp_path: a schedule's wake-up is rebuilt from its header or, without
one, from its decoded value; a timeline record is stored as the packed local entry; memtables are checkpointed
every CHECKPOINT_EVERY records; a restore held at an open transaction is reported, and fails with
RestoreStalled once it has waited (only the fetches' waiting counts) past its bound without progress; a record
without a key or a fetch error fails the restore instead of starting the partition on partial state.
"""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, Message
from task_builder import CODEC, TOPICS, pending_schedule

from scheduler.control.client import make_spec
from scheduler.engine import partition_restore
from scheduler.engine.partition_restore import PartitionRestore, RestoreStalled, local_entry, record_writes
from scheduler.engine.partition_store import PartitionStore
from scheduler.engine.timeline_keys import NO_DEADLINE, WAKE_HEADER, LocalEntry, wake_key

CHANGELOGS = dict(TOPICS.changelogs)
SCHEDULES, TIMELINE, ADMISSIONS = CHANGELOGS["schedules"], CHANGELOGS["timeline"], CHANGELOGS["admissions"]
T = 1_767_225_600_000


def record(topic: str, offset: int, key: bytes | None, value: bytes | None,
           headers: list[tuple[str, bytes]] | None = None) -> Message:
    return Message(topic=topic, partition=0, offset=offset, key=key, value=value, headers=headers, error=None)


def end_of(topic: str, offset: int) -> Message:
    return Message(topic=topic, partition=0, offset=offset, error=KafkaError(KafkaError._PARTITION_EOF))


def active_schedule(schedule_id: str) -> dict:
    state = pending_schedule(schedule_id, make_spec("cron", "* * * * *"), T - 1000)
    state.update(state="ACTIVE", next_fire_ms=T, admission_waiters=[])
    return state


def timeline_entry(deadline_ms: int | None) -> dict:
    return {"schedule_id": "s1", "tenant": "acme", "schedule_version": 1, "occurrence_id": "occ-1",
            "scheduled_for_ms": T, "available_at_ms": T, "deadline_ms": deadline_ms, "topic": "out.acme.high",
            "occurrence": b"ready-to-send"}


@pytest.fixture
def store(tmp_path: Path) -> Iterator[PartitionStore]:
    opened = PartitionStore(tmp_path / "p0")
    yield opened
    opened.close()


def restore_of(store: PartitionStore, ends: dict[str, int], timeout_s: float = 120.0,
               reports: list[tuple[str, int, float]] | None = None) -> PartitionRestore:
    bounds = {topic: (0, ends.get(topic, 0)) for topic in CHANGELOGS.values()}
    on_wait = None if reports is None else (lambda topic, partition, seconds: reports.append((topic, partition, seconds)))
    return PartitionRestore(store, CHANGELOGS, 0, CODEC, bounds, timeout_s, on_wait)


def test_a_schedules_wake_up_comes_from_its_header_or_else_from_its_decoded_state(store: PartitionStore) -> None:
    decoded = active_schedule("s2")
    restore = restore_of(store, {SCHEDULES: 2})
    restore.advance([(SCHEDULES, [record(SCHEDULES, 0, b"s1", b"opaque", [(WAKE_HEADER, b"wake-of-s1")]),
                                  record(SCHEDULES, 1, b"s2", CODEC.encode("ScheduleState", decoded))])],
                    {SCHEDULES: 2}, 0.0)
    assert store.get("timeline", b"wake-of-s1") == b""
    key = wake_key(decoded)  # type: ignore[arg-type]
    assert key is not None and store.get("timeline", key) == b""
    assert restore.done and restore.applied["schedules"] == 2


def test_a_timeline_record_is_stored_as_its_packed_local_entry(store: PartitionStore) -> None:
    restore = restore_of(store, {TIMELINE: 3})
    restore.advance([(TIMELINE, [record(TIMELINE, 0, b"k1", CODEC.encode("TimelineEntry", timeline_entry(T + 5))),
                                 record(TIMELINE, 1, b"k2", CODEC.encode("TimelineEntry", timeline_entry(None))),
                                 record(TIMELINE, 2, b"k2", None)])], {TIMELINE: 3}, 0.0)
    stored = store.get("timeline", b"k1")
    assert stored is not None
    assert LocalEntry.unpack(stored) == LocalEntry("acme", "s1", "out.acme.high", "occ-1", b"ready-to-send", T + 5)
    assert store.get("timeline", b"k2") is None
    entry = LocalEntry.unpack(local_entry(CODEC.encode("TimelineEntry", timeline_entry(None)), CODEC))
    assert entry.deadline_ms == NO_DEADLINE


def test_writes_are_checkpointed_every_checkpoint_every_records_not_before(
        store: PartitionStore, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(partition_restore, "CHECKPOINT_EVERY", 3)
    restore = restore_of(store, {ADMISSIONS: 10})
    restore.advance([(ADMISSIONS, [record(ADMISSIONS, n, b"a%d" % n, b"v") for n in range(2)])], {ADMISSIONS: 2}, 0.0)
    assert store.changelog_offset("admissions") == 0  # written, not yet claimed
    restore.advance([(ADMISSIONS, [record(ADMISSIONS, 2, b"a2", b"v")])], {ADMISSIONS: 3}, 0.0)
    assert store.changelog_offset("admissions") == 3 and not restore.done


def test_an_end_of_partition_moves_the_position_without_counting_as_a_record(store: PartitionStore) -> None:
    restore = restore_of(store, {ADMISSIONS: 4})
    assert restore.eta_s() is None and restore.remaining == 4
    restore.advance([(ADMISSIONS, [record(ADMISSIONS, 0, b"a", b"v"), end_of(ADMISSIONS, 2)])], {}, 0.0)
    assert restore.positions[ADMISSIONS] == 2 and restore.applied["admissions"] == 1
    assert restore.remaining == 2 and restore.eta_s() is not None


def test_a_restore_held_at_an_open_transaction_is_reported_then_fails_after_its_bound(
        store: PartitionStore, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(partition_restore, "STALL_REPORT_S", 0.0)
    reports: list[tuple[str, int, float]] = []
    restore = restore_of(store, {ADMISSIONS: 5}, timeout_s=1.0, reports=reports)
    restore.advance([(ADMISSIONS, [record(ADMISSIONS, 0, b"a", b"v"), end_of(ADMISSIONS, 1)])], {ADMISSIONS: 1}, 0.6)
    assert reports == []  # progress: the position moved
    restore.advance([], {ADMISSIONS: 1}, 0.6)
    assert [(topic, partition) for topic, partition, _ in reports] == [(ADMISSIONS, 0)]
    with pytest.raises(RestoreStalled, match=r"stopped at offset 1 of 5"):
        restore.advance([], {ADMISSIONS: 1}, 0.6)


def test_only_waiting_without_progress_counts_towards_the_bound(store: PartitionStore) -> None:
    restore = restore_of(store, {ADMISSIONS: 10}, timeout_s=1.0)
    for offset in range(1, 6):
        restore.advance([], {ADMISSIONS: offset - 1}, 0.6)  # a fetch that waited and brought nothing
        restore.advance([], {ADMISSIONS: offset}, 0.0)  # then one that moved on: the wait starts over
    with pytest.raises(RestoreStalled):
        restore.advance([], {ADMISSIONS: 5}, 1.1)


def test_the_end_of_a_held_transaction_is_reported_as_zero(
        store: PartitionStore, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(partition_restore, "STALL_REPORT_S", 0.0)
    reports: list[tuple[str, int, float]] = []
    restore = restore_of(store, {ADMISSIONS: 3}, reports=reports)
    restore.advance([(ADMISSIONS, [end_of(ADMISSIONS, 1)])], {ADMISSIONS: 1}, 0.1)
    restore.advance([], {ADMISSIONS: 1}, 0.1)
    restore.advance([(ADMISSIONS, [record(ADMISSIONS, 1, b"a", b"v")])], {ADMISSIONS: 3}, 0.0)
    assert restore.done and reports[-1] == (ADMISSIONS, 0, 0.0)


def test_a_record_without_a_key_or_a_fetch_error_fails_the_restore(store: PartitionStore) -> None:
    restore = restore_of(store, {ADMISSIONS: 2})
    with pytest.raises(RuntimeError, match="without a key"):
        restore.advance([(ADMISSIONS, [record(ADMISSIONS, 0, None, b"v")])], {}, 0.0)
    failed = Message(topic=ADMISSIONS, partition=0, offset=0, error=KafkaError(KafkaError._TRANSPORT))
    with pytest.raises(RuntimeError, match=ADMISSIONS):
        restore.advance([(ADMISSIONS, [failed])], {}, 0.0)


def test_record_writes_gives_the_standbys_the_same_conversion() -> None:
    with_header = record(SCHEDULES, 0, b"s1", b"opaque", [(WAKE_HEADER, b"w1")])
    assert record_writes("schedules", with_header, CODEC) == {"schedules": {b"s1": b"opaque"}, "timeline": {b"w1": b""}}
    assert record_writes("schedules", record(SCHEDULES, 1, b"s1", None), CODEC) == {"schedules": {b"s1": None},
                                                                                  "timeline": {}}
    assert record_writes("timeline", record(TIMELINE, 0, b"k", None), CODEC) == {"timeline": {b"k": None}}
    assert record_writes("admissions", record(ADMISSIONS, 0, b"a", b"v"), CODEC) == {"admissions": {b"a": b"v"}}
    with pytest.raises(ValueError):
        record_writes("admissions", record(ADMISSIONS, 0, None, b"v"), CODEC)
