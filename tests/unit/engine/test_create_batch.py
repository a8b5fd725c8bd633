"""A CreateBatch on the commands topic, in memory over a real RocksDB store: each CREATE taken as alone,
what a batch may not hold refused by itself; and a PENDING state read back as the store holds it."""
from __future__ import annotations

import pytest
from task_builder import CODEC, make_task, outputs

from scheduler.control.client import make_spec
from scheduler.engine.task import SchedulerTask
from scheduler.wire.partitioning import partition_for

START = 1_800_000_000_000
PARTITIONS = 2


def command(schedule_id: str, command_id: str, kind: str = "CREATE", expression: str = "0 3 * * *") -> dict:
    return {"command_id": command_id, "type": kind, "schedule_id": schedule_id, "tenant": "acme",
            "idempotency_key": f"key-{schedule_id}", "expected_version": None,
            "spec": make_spec("cron", expression) if kind == "CREATE" else None, "occurrence_id": None,
            "issued_at_ms": START, "backfill_from_ms": None, "backfill_to_ms": None, "overlap_override": None}


def ids_of(partition: int, count: int) -> list[str]:
    found = (f"s{n}" for n in range(1000) if partition_for(f"s{n}".encode(), PARTITIONS) == partition)
    return [next(found) for _ in range(count)]


def reservations(task: SchedulerTask, now_ms: int) -> list[tuple[bytes, bytes]]:
    """The turn's AdmissionRequests (key, value), the turn committed."""
    task.admissions.send_reservations(now_ms)
    asks = [(key, value) for topic, key, value, _ in task.ctx.outbox if topic == "admissions"]
    task.committed({})
    return asks


def answer(task: SchedulerTask, asks: list[tuple[bytes, bytes]], now_ms: int) -> list[dict]:
    """Count the requests here, answer them here: the CommandResults of the answers."""
    for n, (key, value) in enumerate(asks):
        task.handlers["admissions"](key, value, n, now_ms)
    answers = [(key, value) for topic, key, value, _ in task.ctx.outbox if topic == "admission-results"]
    task.committed({})
    for n, (key, value) in enumerate(answers):
        task.handlers["admission-results"](key, value, n, now_ms)
    return outputs(task, "results", "CommandResult")


@pytest.fixture
def task(tmp_path):
    task = make_task(tmp_path / "p0", partitions=PARTITIONS, max_active_schedules=100)
    yield task
    task.store.close()


def test_each_create_of_a_batch_is_taken_as_alone_and_what_a_batch_may_not_hold_is_refused_by_itself(task):
    here, other = ids_of(0, 3), ids_of(1, 1)
    commands = [command(here[0], "c1"), command(here[0], "c2"), command(here[1], "c3", expression="61 * * * *"),
                command(here[2], "c4", kind="PAUSE"), command(other[0], "c5")]
    task.handlers["commands"](b"batch-1", CODEC.encode("CreateBatch", {"batch_id": "batch-1", "commands": commands}),
                              0, START)
    refused = {r["command_id"]: (r["reason"], r["message"], r["schedule_id"])
               for r in outputs(task, "results", "CommandResult")}
    assert refused.keys() == {"c3", "c4", "c5"}
    assert refused["c3"][0] == "INVALID_SPEC"
    assert refused["c4"][:2] == ("MALFORMED_RECORD", "a CreateBatch holds only CREATE commands, not PAUSE")
    assert refused["c5"][0] == "MALFORMED_RECORD" and refused["c5"][1].startswith("schedule_id belongs to partition 1")
    assert task.ctx.reservations == {"acme": [here[0]]}, "the repeated create waits for the same slot"
    accepted = answer(task, reservations(task, START + 1), START + 1)
    assert sorted((r["command_id"], r["status"], r["version"]) for r in accepted) == [
        ("c1", "ACCEPTED", 1), ("c2", "ACCEPTED", 1)]
    task.committed({})
    assert task.ctx.schedule(here[0])["state"] == "ACTIVE" and task.ctx.schedule(here[1]) is None


def test_a_record_neither_a_command_nor_a_batch_is_refused_with_what_it_is(task):
    request = CODEC.encode("AdmissionRequest", {"tenant": "acme", "schedule_id": "s1", "kind": "RESERVE",
                                                "requested_at_ms": START})
    task.handlers["commands"](b"s1", request, 7, START)
    [result] = outputs(task, "results", "CommandResult")
    assert (result["reason"], result["message"]) == (
        "MALFORMED_RECORD", "expected a Command or a CreateBatch record, got a AdmissionRequest")
    assert result["source"] == "commands/0/7"


def test_a_pending_state_is_read_back_as_the_store_holds_it_not_as_an_aborted_turn_left_it(task):
    [sid] = ids_of(0, 1)
    task.handlers["commands"](sid.encode(), CODEC.encode("Command", command(sid, "c1")), 0, START)
    asks = reservations(task, START)
    task.handlers["commands"](sid.encode(), CODEC.encode("Command", command(sid, "c2")), 1, START)
    raw = task.ctx.txn.get("schedules", sid.encode())
    assert CODEC.decode("ScheduleState", raw)["admission_waiters"] == ["c1", "c2"]
    task.reset()  # the turn that added the second waiter aborted: the store still has one waiter
    assert [r["command_id"] for r in answer(task, asks, START)] == ["c1"]


def test_a_tenant_counted_in_this_process_answers_in_the_same_turn_and_only_the_planned_state_is_logged(tmp_path):
    task = make_task(tmp_path / "p0", max_active_schedules=2)  # one partition: it counts every tenant
    try:
        for n, sid in enumerate(["a", "b", "c"]):
            task.handlers["commands"](sid.encode(), CODEC.encode("Command", command(sid, f"c-{sid}")), n, START)
        task.admissions.send_reservations(START, lambda tenant: task.admissions)
        assert not [1 for topic, *_ in task.ctx.outbox if topic in ("admissions", "admission-results")]
        results = {r["command_id"]: (r["status"], r["reason"]) for r in outputs(task, "results", "CommandResult")}
        assert results == {"c-a": ("ACCEPTED", None), "c-b": ("ACCEPTED", None), "c-c": ("REJECTED", "QUOTA")}
        logged = {key: value for _, key, value in task.changelog_records()["schedules"]}
        assert {CODEC.decode("ScheduleState", logged[sid])["state"] for sid in (b"a", b"b")} == {"ACTIVE"}
        assert logged[b"c"] is None, "the refused schedule is never logged as anything but gone"
        task.committed({})
        task.handlers["commands"](b"d", CODEC.encode("Command", command("d", "c-d")), 3, START)
        task.admissions.send_reservations(START, lambda tenant: task.admissions)
        [refused] = outputs(task, "results", "CommandResult")
        assert (refused["command_id"], refused["reason"]) == ("c-d", "QUOTA"), "the count was committed"
    finally:
        task.store.close()
