"""Each handler of a partition's task, in memory over a real RocksDB store, through its public methods:
what it emits and what it leaves in the store once the turn commits."""
from __future__ import annotations

import pytest
from task_builder import CODEC, admit_schedule, make_task, outputs

from scheduler.control.client import make_spec
from scheduler.engine.task import SchedulerTask
from scheduler.engine.timeline_keys import DISPATCH

MINUTE = 60_000
START = 1_800_000_000_000 - 1_800_000_000_000 % MINUTE + 5_000


def admit(task: SchedulerTask, schedule_id: str, spec: dict, granted: bool = True) -> None:
    admit_schedule(task, schedule_id, spec, START, granted=granted)


def request(kind: str, schedule_id: str = "s1") -> bytes:
    return CODEC.encode("AdmissionRequest", {"tenant": "acme", "schedule_id": schedule_id, "kind": kind,
                                             "requested_at_ms": START})


def attempt_event(occurrence: dict, kind: str, token: str, **fields: object) -> bytes:
    return CODEC.encode("AttemptEvent", {
        "occurrence_id": occurrence["occurrence_id"], "schedule_id": occurrence["schedule_id"],
        "tenant": occurrence["tenant"], "schedule_version": occurrence["schedule_version"],
        "scheduled_for_ms": occurrence["scheduled_for_ms"], "attempt": occurrence["attempt"], "attempt_token": token,
        "kind": kind, "retryable": fields.get("retryable", False), "error_class": fields.get("error_class"),
        "error_message": None, "worker_id": "w1", "at_ms": START, "progress": None})


def dispatch_all(task: SchedulerTask, now_ms: int) -> list[dict]:
    """Send every due strict entry the dispatcher offers; returns the occurrences produced."""
    for _, (dispatcher, key, raw) in task.dispatcher.offers(DISPATCH, now_ms, 1000):
        dispatcher.send(key, raw, now_ms)
    sent = [CODEC.decode("Occurrence", value) for topic, _, value, _ in task.ctx.outbox
            if topic.startswith("occurrences.")]
    task.committed({})
    return sent


@pytest.fixture
def task(tmp_path):
    task = make_task(tmp_path / "p0", max_active_schedules=2)
    yield task
    task.store.close()


def test_the_admission_count_grants_up_to_the_quota_then_refuses_and_a_release_frees_a_slot(task):
    answers = []
    for n, kind in enumerate(["RESERVE", "RESERVE", "RESERVE", "RELEASE", "RESERVE"]):
        task.handlers["admissions"](b"acme", request(kind, f"s{n}"), n, START)
        answers += [(a["schedule_id"], a["granted"], a["active_schedules"])
                    for a in outputs(task, "admission-results", "AdmissionResult")]
        task.committed({})
    assert answers == [("s0", True, 1), ("s1", True, 2), ("s2", False, 2), ("s4", True, 2)]


def test_a_granted_create_is_planned_published_and_answered_and_a_refused_one_leaves_nothing(task):
    admit(task, "yes", make_spec("cron", "* * * * *"))
    results = outputs(task, "results", "CommandResult")
    assert [(r["status"], r["version"]) for r in results] == [("ACCEPTED", 1)]
    assert [s["state"] for s in outputs(task, "schedule-view.acme.None", "ScheduleState")] == ["ACTIVE"]
    assert task.ctx.tenants_used == {"acme"}, "the runtime must make the tenant's topics before producing"
    task.committed({})
    assert task.scan.next_due_ms(DISPATCH) == START - START % MINUTE + MINUTE
    admit(task, "no", make_spec("cron", "* * * * *"), granted=False)
    [refused] = outputs(task, "results", "CommandResult")
    assert (refused["status"], refused["reason"]) == ("REJECTED", "QUOTA")
    task.committed({})
    assert task.ctx.schedule("no") is None


def test_a_retryable_failure_enqueues_the_next_attempt_and_the_last_one_goes_to_the_dead_letters(task):
    admit(task, "flaky", make_spec("once", "2027-01-15T08:00:05Z", max_attempts=2, retry_backoff_ms=1000))
    task.committed({})
    due_ms = task.scan.next_due_ms(DISPATCH)
    [first] = dispatch_all(task, due_ms)
    for kind in ("STARTED", "FAILED"):
        task.handlers["attempts"](b"flaky", attempt_event(first, kind, "t1", retryable=True), 1, due_ms + 10)
    task.committed({})
    retry_ms = task.scan.next_due_ms(DISPATCH)
    assert retry_ms is not None and retry_ms > due_ms + 10, "the retry waits its backoff after the failure"
    [second] = dispatch_all(task, retry_ms)
    assert (second["occurrence_id"], second["attempt"]) == (first["occurrence_id"], 2)
    for kind in ("STARTED", "FAILED"):
        task.handlers["attempts"](b"flaky", attempt_event(second, kind, "t2", retryable=True), 2, retry_ms + 10)
    [dead] = outputs(task, "dead-letters.acme.None", "DeadLetter")
    assert dead["occurrence"]["occurrence_id"] == first["occurrence_id"]
    assert [e["kind"] for e in dead["history"]] == ["STARTED", "FAILED", "STARTED", "FAILED"]
    task.committed({})
    assert task.ctx.status(first["occurrence_id"])["state"] == "DEAD"
    assert task.scan.next_due_ms(DISPATCH) is None, "no attempt after the last"


def offer_and_send(task: SchedulerTask, now_ms: int) -> list[bytes]:
    """One turn's dispatch of every due strict entry, left uncommitted; returns the occurrence topics sent to."""
    for _, (dispatcher, key, raw) in task.dispatcher.offers(DISPATCH, now_ms, 1000):
        dispatcher.send(key, raw, now_ms)
    return [topic for topic, _, _, _ in task.ctx.outbox if topic.startswith("occurrences.")]


def test_skip_if_running_sends_one_and_records_the_overlapping_fire_as_skipped(task):
    admit(task, "slow", make_spec("rate", "every 1s", anchor_at_ms=START, overlap_policy="SKIP_IF_RUNNING"))
    task.committed({})
    [sent] = dispatch_all(task, START + 1_000)
    assert sent["scheduled_for_ms"] == START + 1_000
    assert offer_and_send(task, START + 2_000) == [], "the first one still runs"
    [skipped] = outputs(task, "events", "OccurrenceEvent")
    assert (skipped["kind"], skipped["scheduled_for_ms"]) == ("SKIPPED_OVERLAP", START + 2_000)
    task.committed({})
    assert task.ctx.status(skipped["occurrence_id"])["state"] == "SKIPPED_OVERLAP"


def test_an_entry_past_its_deadline_goes_back_to_the_misfire_policy_instead_of_being_sent(task):
    admit(task, "late", make_spec("cron", "* * * * *", misfire_policy="SKIP", max_lateness_ms=1_000))
    task.committed({})
    due_ms = task.scan.next_due_ms(DISPATCH)
    assert offer_and_send(task, due_ms + 30_000) == []
    [missed] = outputs(task, "events", "OccurrenceEvent")
    assert (missed["kind"], missed["scheduled_for_ms"]) == ("MISSED", due_ms)
    task.committed({})
    assert task.scan.next_due_ms(DISPATCH) == due_ms + MINUTE, "planned again from the next fire on"


def test_trigger_of_an_unknown_schedule_and_rerun_of_an_unfinished_occurrence_are_rejected_with_reasons(task):
    base = {"idempotency_key": None, "expected_version": None, "spec": None, "issued_at_ms": START,
            "backfill_from_ms": None, "backfill_to_ms": None, "overlap_override": None}
    trigger = {**base, "command_id": "c1", "type": "TRIGGER", "schedule_id": "ghost", "tenant": "acme",
               "occurrence_id": None}
    task.handlers["commands"](b"ghost", CODEC.encode("Command", trigger), 0, START)
    admit(task, "busy", make_spec("cron", "* * * * *"))
    rerun = {**base, "command_id": "c2", "type": "RERUN", "schedule_id": "busy", "tenant": "acme",
             "occurrence_id": "nope"}
    task.handlers["commands"](b"busy", CODEC.encode("Command", rerun), 1, START)
    reasons = {r["command_id"]: r.get("reason") for r in outputs(task, "results", "CommandResult")}
    assert reasons["c1"] == "UNKNOWN_SCHEDULE" and reasons["c2"] == "UNKNOWN_OCCURRENCE"


def create(schedule_id: str, command_id: str, tenant: str = "acme") -> bytes:
    return CODEC.encode("Command", {
        "command_id": command_id, "type": "CREATE", "schedule_id": schedule_id, "tenant": tenant,
        "idempotency_key": None, "expected_version": None, "spec": make_spec("cron", "0 3 1 1 *"),
        "occurrence_id": None, "issued_at_ms": START, "backfill_from_ms": None, "backfill_to_ms": None,
        "overlap_override": None})


def test_a_turn_of_creates_asks_once_per_tenant_and_the_answer_grants_in_order_up_to_the_quota(task):
    for n, (sid, tenant) in enumerate([("a1", "acme"), ("b1", "beta"), ("a2", "acme"), ("a3", "acme")]):
        task.handlers["commands"](sid.encode(), create(sid, f"c-{sid}", tenant), n, START)
    assert outputs(task, "admissions", "AdmissionRequest") == [], "asked only once the turn's inputs are in"
    task.admissions.send_reservations(START)
    asks = outputs(task, "admissions", "AdmissionRequest")
    assert [(a["tenant"], a["kind"], a["schedule_ids"], a["partition"]) for a in asks] == [
        ("acme", "RESERVE", ["a1", "a2", "a3"], 0), ("beta", "RESERVE", ["b1"], 0)]
    raw_asks = [(key, value) for topic, key, value, _ in task.ctx.outbox if topic == "admissions"]
    task.committed({})
    for n, (key, value) in enumerate(raw_asks):  # this partition also counts the tenants (one partition)
        task.handlers["admissions"](key, value, n, START + 1)
    answers = [(topic, key, value, partition) for topic, key, value, partition in task.ctx.outbox
               if topic == "admission-results"]
    decoded = [CODEC.decode("AdmissionResult", value) for _, _, value, _ in answers]
    assert [(a["tenant"], a["granted_ids"], a["refused_ids"], a["active_schedules"]) for a in decoded] == [
        ("acme", ["a1", "a2"], ["a3"], 2), ("beta", ["b1"], [], 1)], "quota 2: the first two of acme get a slot"
    assert [(key, partition) for _, key, _, partition in answers] == [(b"acme", 0), (b"beta", 0)]
    task.committed({})
    for n, (_, key, value, _) in enumerate(answers):
        task.handlers["admission-results"](key, value, n, START + 2)
    results = {r["command_id"]: (r["status"], r["reason"], r["schedule_id"])
               for r in outputs(task, "results", "CommandResult")}
    assert results == {"c-a1": ("ACCEPTED", None, "a1"), "c-a2": ("ACCEPTED", None, "a2"),
                       "c-a3": ("REJECTED", "QUOTA", "a3"), "c-b1": ("ACCEPTED", None, "b1")}
    result_keys = sorted(key for topic, key, _, _ in task.ctx.outbox if topic == "results")
    assert result_keys == [b"a1", b"a2", b"a3", b"b1"], "each result is keyed by its schedule, as one by one"
    task.committed({})
    assert task.ctx.schedule("a3") is None and task.ctx.schedule("a1")["state"] == "ACTIVE"


def test_a_create_repeated_in_the_same_turn_waits_for_the_same_slot_and_both_get_the_one_answer(task):
    for n, command_id in enumerate(["first", "again"]):
        command = CODEC.decode("Command", create("s1", command_id))
        task.handlers["commands"](b"s1", CODEC.encode("Command", {**command, "idempotency_key": "k"}), n, START)
    task.admissions.send_reservations(START)
    [(key, value)] = [(key, value) for topic, key, value, _ in task.ctx.outbox if topic == "admissions"]
    assert CODEC.decode("AdmissionRequest", value)["schedule_ids"] == ["s1"], "one slot asked for one schedule"
    task.committed({})
    task.handlers["admissions"](key, value, 0, START + 1)
    [(key, value)] = [(key, value) for topic, key, value, _ in task.ctx.outbox if topic == "admission-results"]
    task.committed({})
    task.handlers["admission-results"](key, value, 0, START + 2)
    results = outputs(task, "results", "CommandResult")
    assert sorted((r["command_id"], r["status"]) for r in results) == [("again", "ACCEPTED"), ("first", "ACCEPTED")]


def test_a_batch_for_a_partition_that_does_not_exist_is_ignored_and_counts_nothing(task):
    bad = CODEC.encode("AdmissionRequest", {"tenant": "acme", "schedule_id": "", "kind": "RESERVE",
                                            "requested_at_ms": START, "partition": 7, "schedule_ids": ["x"]})
    task.handlers["admissions"](b"acme", bad, 0, START)
    assert outputs(task, "admission-results", "AdmissionResult") == []
    task.committed({})
    task.handlers["admissions"](b"acme", request("RESERVE", "s9"), 1, START)
    [answer] = outputs(task, "admission-results", "AdmissionResult")
    assert (answer["granted"], answer["active_schedules"]) == (True, 1)
