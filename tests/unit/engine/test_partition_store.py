import gc
import signal
import subprocess
import sys
import time

from rocksdict import Options, Rdict

from scheduler.engine.partition_store import STATUS_TTL_SECONDS, PartitionStore, StoreTransaction
from scheduler.engine.timeline_keys import (
    DISPATCH,
    END,
    WAKE,
    LocalEntry,
    due_ms_of,
    lane_bound,
    occurrence_key,
    wake_key,
    wake_schedule_id,
)
from scheduler.wire.topology import Topology, default_topology_file


def test_writes_are_invisible_to_the_store_until_committed(tmp_path):
    store = PartitionStore(tmp_path / "p0")
    txn = StoreTransaction(store)
    txn.put("schedules", b"s1", b"v1")
    assert txn.get("schedules", b"s1") == b"v1"
    assert store.get("schedules", b"s1") is None
    store.write(txn.changes, {"schedules": 42})
    assert store.get("schedules", b"s1") == b"v1"
    assert store.changelog_offset("schedules") == 42
    assert store.changelog_offset("timeline") == 0
    store.close()


def test_state_and_checkpoint_survive_reopening(tmp_path):
    store = PartitionStore(tmp_path / "p0")
    store.write({"timeline": {b"k": b"v"}}, {"timeline": 7})
    store.close()
    again = PartitionStore(tmp_path / "p0")
    assert again.get("timeline", b"k") == b"v"
    assert again.changelog_offset("timeline") == 7
    again.close()


def test_a_corrupt_directory_is_replaced_by_an_empty_store(tmp_path):
    path = tmp_path / "p0"
    path.mkdir()
    (path / "CURRENT").write_text("garbage that is not a manifest name\n")
    store = PartitionStore(path)
    assert store.changelog_offset("schedules") == 0
    store.close()


def test_timeline_keys_sort_by_lane_then_due_time():
    keys = [occurrence_key(DISPATCH, t, sid, t) for t, sid in [(2000, "a"), (1000, "z"), (1000, "b")]]
    ordered = sorted(keys)
    assert [due_ms_of(k) for k in ordered] == [1000, 1000, 2000]
    assert ordered[0] < ordered[1]  # same due time: by schedule id
    assert all(k < lane_bound(DISPATCH, 2000) for k in keys)
    assert not keys[0] < lane_bound(DISPATCH, 1999)
    active = {"state": "ACTIVE", "schedule_id": "sched-1", "next_fire_ms": 5, "pending": [], "updated_at_ms": 0}
    assert wake_schedule_id(wake_key(active)) == "sched-1"
    assert wake_key(active) == WAKE + (5).to_bytes(8, "big") + b"sched-1"
    ended = {**active, "next_fire_ms": None, "pending": [{"due_ms": 7000, "scheduled_for_ms": 7000}]}
    assert wake_key(ended) == END + (67000).to_bytes(8, "big") + b"sched-1"
    assert wake_key({**ended, "updated_at_ms": 90000}) == END + (91000).to_bytes(8, "big") + b"sched-1"
    assert wake_key({**active, "state": "PAUSED"}) is None


def test_local_entry_round_trips():
    entry = LocalEntry("tenant-ä", "s1", "sched.occurrences.t.high", "occ-1", b"\x00\xffbody", 1234, "QUEUE_ONE")
    assert LocalEntry.unpack(entry.pack()) == entry


def test_entries_due_at_one_instant_come_out_tenant_by_tenant_in_turn():
    big = [occurrence_key(DISPATCH, 1000, f"big-{n}", 1000, rank=n) for n in range(3)]
    small = [occurrence_key(DISPATCH, 1000, "zz-small", 1000, rank=0)]
    later = [occurrence_key(DISPATCH, 1001, "aa", 1001, rank=0)]
    assert sorted(big + small + later) == [big[0], small[0], big[1], big[2], later[0]]


def test_a_bulk_write_lands_at_commit_and_is_claimed_only_by_a_checkpoint(tmp_path):
    store = PartitionStore(tmp_path / "p0")
    store.write({"schedules": {b"gone": b"old"}}, {"schedules": 3})
    bulk = store.bulk()
    bulk.put(b"s1", b"v1", bulk.handle("schedules"))
    bulk.put(b"W1", b"", bulk.handle("timeline"))
    bulk.delete(b"gone", bulk.handle("schedules"))
    assert store.get("schedules", b"s1") is None and store.changelog_offset("schedules") == 3
    bulk.commit()
    assert store.get("schedules", b"s1") == b"v1" and store.get("timeline", b"W1") == b""
    assert store.get("schedules", b"gone") is None
    assert store.changelog_offset("schedules") == 3, "an unlogged write claims nothing"
    store.checkpoint({"schedules": 10, "timeline": 4})
    assert (store.changelog_offset("schedules"), store.changelog_offset("timeline")) == (10, 4)
    store.close()


_KILLED_MID_RESTORE = """
import os, signal, sys
from pathlib import Path
from scheduler.engine.partition_store import PartitionStore
store = PartitionStore(Path(sys.argv[1]))
bulk = store.bulk()
bulk.put(b"s1", b"v1", bulk.handle("schedules"))
bulk.commit()
store.checkpoint({"schedules": 10})
bulk = store.bulk()
bulk.put(b"s2", b"v2", bulk.handle("schedules"))
bulk.commit()
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_kill_after_unlogged_writes_leaves_the_last_checkpoint_and_all_it_claims(tmp_path):
    """Restores write without the WAL: a kill -9 loses what came after the last checkpoint, which the next restore
    reads again from the changelog, and never what a checkpoint claims."""
    store = PartitionStore(tmp_path / "p0")
    store.write({"schedules": {b"s0": b"v0"}}, {"schedules": 3})
    store.close()
    killed = subprocess.run([sys.executable, "-c", _KILLED_MID_RESTORE, str(tmp_path / "p0")], timeout=60)
    assert killed.returncode == -signal.SIGKILL
    store = PartitionStore(tmp_path / "p0")
    try:
        assert store.changelog_offset("schedules") == 10
        assert store.get("schedules", b"s0") == b"v0" and store.get("schedules", b"s1") == b"v1"
        assert store.get("schedules", b"s2") is None, "written after the checkpoint, unlogged: lost, read again"
    finally:
        store.close()


def test_the_status_store_lives_in_its_own_database_with_its_offsets(tmp_path):
    store = PartitionStore(tmp_path / "p0")
    store.write({"occurrences": {b"occ-1": b"s"}, "schedules": {b"s1": b"v"}}, {"occurrences": 5, "schedules": 9})
    bulk = store.bulk()
    bulk.put(b"occ-2", b"t", bulk.handle("occurrences"))
    bulk.commit()
    del bulk  # its column family handle would keep the database open
    store.checkpoint({"occurrences": 6})
    store.close()
    assert (tmp_path / "p0-status" / "CURRENT").exists()
    again = PartitionStore(tmp_path / "p0")
    assert (again.get("occurrences", b"occ-1"), again.get("occurrences", b"occ-2")) == (b"s", b"t")
    assert (again.changelog_offset("occurrences"), again.changelog_offset("schedules")) == (6, 9)
    again.close()


def test_a_status_older_than_the_ttl_is_dropped_by_compaction_and_the_other_stores_keep_theirs(tmp_path):
    store = PartitionStore(tmp_path / "p0", status_ttl_seconds=1)
    store.write({"occurrences": {b"occ-old": b"s"}, "schedules": {b"s1": b"v"}}, {})
    deadline = time.monotonic() + 15
    while store.get("occurrences", b"occ-old") is not None and time.monotonic() < deadline:
        store.write({"occurrences": {b"occ-new": str(time.monotonic()).encode()}}, {})
        store.compact()
        time.sleep(0.2)
    assert store.get("occurrences", b"occ-old") is None
    assert store.get("schedules", b"s1") == b"v"
    store.close()


def test_the_status_ttl_is_the_changelogs_retention():
    topology = Topology.load(default_topology_file())
    retention_ms = topology.topics["occurrence-status-changelog"].config["retention.ms"]
    assert STATUS_TTL_SECONDS * 1000 == int(retention_ms)


def test_a_status_family_of_the_older_layout_is_dropped_and_restored_from_its_changelog(tmp_path):
    path = tmp_path / "p0"
    families = {name: Options(raw_mode=True) for name in ("schedules", "timeline", "occurrences", "admissions", "meta")}
    options = Options(raw_mode=True)
    options.create_if_missing(True)
    options.create_missing_column_families(True)
    old = Rdict(str(path), options=options, column_families=families)
    old.get_column_family("occurrences")[b"occ-1"] = b"s"
    old.get_column_family("schedules")[b"s1"] = b"v"
    old.get_column_family("meta")[b"occurrences"] = (12).to_bytes(8, "big")
    old.close()
    del old
    gc.collect()
    store = PartitionStore(path)
    assert store.get("schedules", b"s1") == b"v"
    assert store.get("occurrences", b"occ-1") is None and store.changelog_offset("occurrences") == 0
    store.close()
