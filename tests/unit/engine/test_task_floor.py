from scheduler.engine.partition_store import PartitionStore
from scheduler.engine.task import SchedulerTask, TaskTopics
from scheduler.engine.timeline_keys import DISPATCH, LocalEntry, occurrence_key

TOPICS = TaskTopics("c", "a", "ad", "ar", "r", "e", {"schedules": "s", "timeline": "t", "occurrences": "o",
                                                     "admissions": "x"})


def task_with(tmp_path, due_times):
    store = PartitionStore(tmp_path / "p0")
    entry = LocalEntry("acme", "s", "topic", "occ", b"body").pack()
    store.write({"timeline": {occurrence_key(DISPATCH, t, f"s{t}", t): entry for t in due_times}}, {})
    return SchedulerTask(0, store, TOPICS, codec=None, tenant_topic=None, horizon_ms=0, ensure_tenant=None,
                         retry_allowed=None, max_active_schedules=None, max_concurrency=lambda tenant: None,
                         partitions=1)


def test_the_scan_starts_after_what_the_last_turn_dispatched(tmp_path):
    task = task_with(tmp_path, [1000, 2000, 3000, 4000])
    keys = [key for key, _ in task.due(DISPATCH, now_ms=3000)]
    assert len(keys) == 3
    for key in keys[:2]:
        task.dispatched(key, LocalEntry.unpack(task.store.get("timeline", key)), 3000)
    task.committed({})
    assert task._floor[DISPATCH] == keys[2], "held-back entry stays the floor"
    assert [k for k, _ in task.due(DISPATCH, now_ms=5000)] == [keys[2], occurrence_key(DISPATCH, 4000, "s4000", 4000)]
    task.store.close()


def test_when_everything_scanned_was_sent_the_floor_moves_past_it_and_new_earlier_work_lowers_it(tmp_path):
    task = task_with(tmp_path, [1000, 2000])
    for key, raw in list(task.due(DISPATCH, now_ms=2000)):
        task.dispatched(key, LocalEntry.unpack(raw), 2000)
    task.committed({})
    assert task.next_due_ms(DISPATCH) is None
    late = occurrence_key(DISPATCH, 500, "late", 500)
    task.txn.put("timeline", late, LocalEntry("acme", "late", "topic", "occ", b"b").pack())
    task.timeline_changelog[late] = b""
    task.committed({})
    assert task.next_due_ms(DISPATCH) == 500
    task.store.close()
