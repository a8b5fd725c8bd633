from task_builder import make_task

from scheduler.engine.timeline_keys import DISPATCH, LocalEntry, occurrence_key


def task_with(tmp_path, due_times):
    task = make_task(tmp_path / "p0", horizon_ms=0)
    entry = LocalEntry("acme", "s", "topic", "occ", b"body").pack()
    task.store.write({"timeline": {occurrence_key(DISPATCH, t, f"s{t}", t): entry for t in due_times}}, {})
    return task


def test_the_scan_starts_after_what_the_last_turn_dispatched(tmp_path):
    task = task_with(tmp_path, [1000, 2000, 3000, 4000])
    keys = [key for key, _ in task.scan.due(DISPATCH, now_ms=3000)]
    assert len(keys) == 3
    for key in keys[:2]:
        task.dispatcher.send(key, task.store.get("timeline", key), 3000)
    task.committed({})
    assert task.scan.floor(DISPATCH) == keys[2], "held-back entry stays the floor"
    assert [k for k, _ in task.scan.due(DISPATCH, now_ms=5000)] == [keys[2], occurrence_key(DISPATCH, 4000, "s4000", 4000)]
    task.store.close()


def test_when_everything_scanned_was_sent_the_floor_moves_past_it_and_new_earlier_work_lowers_it(tmp_path):
    task = task_with(tmp_path, [1000, 2000])
    for key, raw in list(task.scan.due(DISPATCH, now_ms=2000)):
        task.dispatcher.send(key, raw, 2000)
    task.committed({})
    assert task.scan.next_due_ms(DISPATCH) is None
    late = occurrence_key(DISPATCH, 500, "late", 500)
    task.ctx.txn.put("timeline", late, LocalEntry("acme", "late", "topic", "occ", b"b").pack())
    task.ctx.timeline_changelog[late] = b""
    task.committed({})
    assert task.scan.next_due_ms(DISPATCH) == 500
    task.store.close()
