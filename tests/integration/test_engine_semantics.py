"""What the API promises about update, cancel, pause and resume, and about bad input, on the real broker."""
from __future__ import annotations

import math
import time

import pytest
from confluent_kafka import Producer
from engine_harness import TOPOLOGY, SchedulerProcess, TopicReader, ensure_layout, occurrence_topics

from pathological_specs import NEVER_FIRING
from scheduler.control.client import SchedulerClient, make_spec
from scheduler.wire.partitioning import PRODUCER_PARTITIONER_CONF

TENANT = "acme"


def every_second(**fields):
    anchor_ms = math.floor(time.time()) * 1000
    return make_spec("rate", "every 1s", anchor_at_ms=anchor_ms, **fields)


@pytest.fixture
def env(kafka_bootstrap, unique_prefix, tmp_path):
    ensure_layout(kafka_bootstrap, unique_prefix, [TENANT])
    process = SchedulerProcess(kafka_bootstrap, unique_prefix, tmp_path / "state", "a",
                               ("--horizon", "5")).start()
    client = SchedulerClient(kafka_bootstrap, unique_prefix, timeout_s=60)
    occurrences = TopicReader(kafka_bootstrap, occurrence_topics(unique_prefix, [TENANT]), "Occurrence")
    events = TopicReader(kafka_bootstrap, [TOPOLOGY.topic_name("occurrence-events", unique_prefix)],
                         "OccurrenceEvent")
    yield process, client, occurrences, events
    for closeable in (client, occurrences, events):
        closeable.close()
    if process.alive():
        process.terminate()


def of(received, schedule_id):
    return [r for r in received if r.record["schedule_id"] == schedule_id]


def witness_fires_after(occurrences: TopicReader, witness: str, since_ms: int, fires: int = 4) -> None:
    """Absence is proved by what else happened meanwhile: polls (with a deadline) until `fires` fires of the
    every-second `witness` schedule due after `since_ms` were dispatched. The engine then kept dispatching
    for that long, so a fire of a schedule on the same cadence due in that window would have come too."""
    def witnessed(got) -> bool:
        return sum(r.record["scheduled_for_ms"] > since_ms for r in of(got, witness)) >= fires

    occurrences.until(witnessed, timeout=fires + 20)
    assert witnessed(occurrences.received), f"the engine stopped dispatching {witness} after {since_ms}"


def test_after_an_accepted_update_no_occurrence_of_the_old_version_is_dispatched(env):
    process, client, occurrences, events = env
    client.create(TENANT, every_second(), schedule_id="upd")
    occurrences.until(lambda got: len(of(got, "upd")) >= 2, timeout=30)
    accepted = client.update(TENANT, "upd", every_second(payload=b"v2"), expected_version=1)
    assert accepted["version"] == 2
    # The new version's own fires show the engine kept dispatching after the update: had old entries
    # survived it, they would have come out beside these.
    occurrences.until(lambda got: sum(r.record["schedule_version"] == 2 for r in of(got, "upd")) >= 3, timeout=30)
    mine = of(occurrences.received, "upd")
    old = [r for r in mine if r.record["schedule_version"] == 1]
    new = [r for r in mine if r.record["schedule_version"] == 2]
    assert old and new, process.log_tail()
    assert max(r.timestamp_ms for r in old) <= accepted["processed_at_ms"]
    assert all(r.record["payload"] == b"v2" for r in new)
    invalidated = {e.record["occurrence_id"] for e in of(events.poll(1), "upd") if e.record["kind"] == "INVALIDATED"}
    assert invalidated, "the horizon held v1 entries: they must be reported invalidated"
    assert not invalidated & {r.record["occurrence_id"] for r in mine}


def test_a_stale_expected_version_is_rejected_and_changes_nothing(env):
    _, client, _, _ = env
    client.create(TENANT, every_second(), schedule_id="cas")
    with pytest.raises(Exception) as raised:
        client.update(TENANT, "cas", every_second(), expected_version=5)
    assert raised.value.reason == "VERSION_CONFLICT"
    assert client.pause(TENANT, "cas")["version"] == 2


def test_after_an_accepted_cancel_nothing_more_is_dispatched(env):
    process, client, occurrences, events = env
    client.create(TENANT, every_second(), schedule_id="can")
    client.create(TENANT, every_second(), schedule_id="can-witness")
    occurrences.until(lambda got: len(of(got, "can")) >= 2, timeout=30)
    accepted = client.cancel(TENANT, "can")
    witness_fires_after(occurrences, "can-witness", accepted["processed_at_ms"])
    mine = of(occurrences.received, "can")
    assert max(r.timestamp_ms for r in mine) <= accepted["processed_at_ms"], process.log_tail()
    canceled = [e.record for e in of(events.poll(1), "can") if e.record["kind"] == "CANCELED"]
    assert canceled, "the horizon held entries: they must be reported canceled"
    assert client.occurrence(TENANT, canceled[0]["occurrence_id"])["state"] == "CANCELED"
    with pytest.raises(Exception) as raised:
        client.resume(TENANT, "can")
    assert raised.value.reason == "INVALID_STATE"


def test_pause_dispatches_nothing_and_resume_accounts_for_every_skipped_fire(env):
    process, client, occurrences, events = env
    spec = every_second()
    client.create(TENANT, spec, schedule_id="pz")
    client.create(TENANT, every_second(), schedule_id="pz-witness")
    occurrences.until(lambda got: len(of(got, "pz")) >= 2, timeout=30)
    paused = client.pause(TENANT, "pz")
    witness_fires_after(occurrences, "pz-witness", paused["processed_at_ms"], fires=5)
    resumed = client.resume(TENANT, "pz")
    occurrences.until(lambda got: any(r.record["schedule_version"] == 3 for r in of(got, "pz")), timeout=30)
    mine = of(occurrences.received, "pz")
    during = [r for r in mine if paused["processed_at_ms"] < r.timestamp_ms < resumed["processed_at_ms"]]
    assert not during, "a paused schedule dispatched"
    assert any(r.record["schedule_version"] == 3 for r in mine), process.log_tail()

    reported = [e.record for e in of(events.poll(1), "pz")]
    # A fire already due when the pause was accepted, not yet sent, is dropped by it too: INVALIDATED, saying so.
    overdue = [e for e in reported if e["kind"] == "INVALIDATED"]
    assert all("before the change was accepted" in e["reason"] for e in overdue), overdue
    skipped = [e for e in reported if e["kind"] == "SKIPPED_PAUSED"] + overdue
    dispatched = {r.record["scheduled_for_ms"] for r in mine}
    first = min(dispatched)
    last = max(dispatched)
    for instant in range(first, last + 1, 1000):
        covered = instant in dispatched or any(
            e["scheduled_for_ms"] == instant
            or (e["range_first_ms"] is not None and e["range_first_ms"] <= instant <= e["range_last_ms"])
            for e in skipped)
        assert covered, f"fire at {instant} neither dispatched nor recorded as skipped"


def test_malformed_commands_are_rejected_with_their_position_and_processing_goes_on(env, kafka_bootstrap,
                                                                                    unique_prefix):
    _, client, _, _ = env
    commands = TOPOLOGY.topic_name("commands", unique_prefix)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, **PRODUCER_PARTITIONER_CONF})
    delivered = []
    producer.produce(commands, b"\x00not avro", b"bad-1", on_delivery=lambda err, msg: delivered.append(msg))
    producer.flush(10)
    created = client.create(TENANT, every_second(), schedule_id="after-bad")
    assert created["status"] == "ACCEPTED"
    results = TopicReader(kafka_bootstrap, [TOPOLOGY.topic_name("command-results", unique_prefix)],
                          "CommandResult")
    try:
        found = results.until(lambda got: any(r.record["schedule_id"] == "bad-1" for r in got), timeout=20)
    finally:
        results.close()
    rejected = [r.record for r in found if r.record["schedule_id"] == "bad-1"]
    assert len(rejected) == 1
    assert rejected[0]["status"] == "REJECTED" and rejected[0]["reason"] == "MALFORMED_RECORD"
    msg = delivered[0]
    assert rejected[0]["source"] == f"{commands}/{msg.partition()}/{msg.offset()}"


def test_the_engine_rejects_bad_specs_from_producers_that_skip_local_validation(env, kafka_bootstrap,
                                                                                 unique_prefix):
    _, client, _, _ = env
    commands = TOPOLOGY.topic_name("commands", unique_prefix)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, **PRODUCER_PARTITIONER_CONF})
    cases = {"zone": make_spec("cron", "0 * * * *", "Mars/Base"), "cron": make_spec("cron", "61 * * * *"),
             **{f"never-{kind}": spec for kind, spec in NEVER_FIRING.items()}}
    for name, spec in cases.items():
        command = {"command_id": f"raw-{name}", "type": "CREATE", "schedule_id": f"raw-{name}", "tenant": TENANT,
                   "idempotency_key": None, "expected_version": None, "spec": spec, "occurrence_id": None,
                   "issued_at_ms": int(time.time() * 1000)}
        producer.produce(commands, client.codec.encode("Command", command), f"raw-{name}".encode())
    producer.flush(10)
    reader = TopicReader(kafka_bootstrap, [TOPOLOGY.topic_name("command-results", unique_prefix)], "CommandResult")
    try:
        found = reader.until(lambda got: {f"raw-{name}" for name in cases} <= {r.record["command_id"] for r in got}, 20)
    finally:
        reader.close()
    results = {r.record["command_id"]: r.record for r in found}
    assert results["raw-zone"]["reason"] == "UNKNOWN_ZONE" and "time_zone" in results["raw-zone"]["message"]
    assert results["raw-cron"]["reason"] == "INVALID_SPEC" and "expression" in results["raw-cron"]["message"]
    for kind in NEVER_FIRING:  # every fire in a DST gap: refused, not walked to year 9998
        result = results[f"raw-never-{kind}"]
        assert result["reason"] == "INVALID_SPEC" and result["message"].startswith("expression: no fire"), result


def test_create_repeated_with_the_same_idempotency_key_creates_nothing_new(env, kafka_bootstrap, unique_prefix):
    _, client, _, _ = env
    spec = make_spec("cron", "0 12 * * *", "Europe/London")
    first = client.create(TENANT, spec, idempotency_key="order-42")
    again = client.create(TENANT, spec, idempotency_key="order-42")
    assert again["schedule_id"] == first["schedule_id"]
    assert (again["version"], again["next_fires_ms"]) == (first["version"], first["next_fires_ms"])
    view = TopicReader(kafka_bootstrap, [TOPOLOGY.topic_name("schedule-view", unique_prefix, tenant=TENANT)],
                       "ScheduleState")
    try:
        view.until(lambda got: len(got) >= 1, timeout=10)
        view.poll(1)
    finally:
        view.close()
    assert [s.record["version"] for s in view.received if s.record["schedule_id"] == first["schedule_id"]] == [1]
