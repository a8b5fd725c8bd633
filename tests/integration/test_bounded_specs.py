"""Bad input is bounded (issue 28, item 5), on the real broker: a spec that never fires (every fire in a DST
gap) sent by the client, over HTTP and as a raw command record is rejected INVALID_SPEC within a second,
again and again, while another tenant's occurrence due meanwhile is dispatched on time."""
from __future__ import annotations

import time

import pytest
from confluent_kafka import Producer
from control_env import control_env
from engine_harness import TOPOLOGY, TopicReader, soon
from fastapi.testclient import TestClient

from pathological_specs import NEVER_FIRING, dublin_gap_spec
from scheduler.control.client import ValidationError, make_spec
from scheduler.control.specs import validate_spec
from scheduler.wire.partitioning import PRODUCER_PARTITIONER_CONF


@pytest.fixture(scope="module")
def env(kafka_bootstrap, tmp_path_factory):
    yield from control_env(kafka_bootstrap, tmp_path_factory.mktemp("bounded"))


def _raw_create(env, producer: Producer, command_id: str, spec: dict) -> None:
    """A CREATE as a producer that skips the client's validation writes it."""
    command = {"command_id": command_id, "type": "CREATE", "schedule_id": command_id, "tenant": "acme",
               "idempotency_key": None, "expected_version": None, "spec": spec, "occurrence_id": None,
               "issued_at_ms": int(time.time() * 1000)}
    producer.produce(TOPOLOGY.topic_name("commands", env.prefix), env.plane.client.codec.encode("Command", command),
                     command_id.encode())


def test_never_firing_specs_are_rejected_within_a_second_while_another_tenants_fire_is_on_time(env):
    client = env.plane.client
    # The test's own process refuses specs locally too; it shares the machine's cores with the engine, so
    # it builds its Dublin tables before the window rather than while the engine is being measured.
    with pytest.raises(ValidationError):
        validate_spec(NEVER_FIRING["cron"])
    bystander = client.create("globex", make_spec("once", soon(3), payload=b"{}"), schedule_id="bystander")
    assert bystander["status"] == "ACCEPTED"
    due_ms = bystander["next_fires_ms"][0]
    producer = Producer({"bootstrap.servers": env.bootstrap, **PRODUCER_PARTITIONER_CONF})
    results = TopicReader(env.bootstrap, [TOPOLOGY.topic_name("command-results", env.prefix)], "CommandResult")
    occurrences = env.occurrences(("globex",))
    sent_ms: dict[str, int] = {}
    headers = {"Authorization": f"Bearer {env.keys['acme']}"}
    try:
        with TestClient(env.app()) as http:
            # Rounds of never-firing specs, each a distinct spec (no cache answers it), from before the
            # bystander falls due until its occurrence has come.
            rounds = 0
            while ((not occurrences.received or time.time() * 1000 < due_ms + 500)
                   and time.time() * 1000 < due_ms + 10_000):
                minute, rounds = rounds % 60, rounds + 1
                for kind in NEVER_FIRING:
                    command_id = f"raw-{kind}-{rounds}"
                    _raw_create(env, producer, command_id, dublin_gap_spec(kind, minute))
                    sent_ms[command_id] = int(time.time() * 1000)
                producer.flush(10)
                kind = list(NEVER_FIRING)[minute % len(NEVER_FIRING)]
                spec = dublin_gap_spec(kind, minute)
                started = time.monotonic()
                with pytest.raises(ValidationError) as refused:
                    client.create("acme", spec, schedule_id=f"client-{rounds}")
                assert time.monotonic() - started < 1.0, "the client refuses within a second"
                assert refused.value.reason == "INVALID_SPEC" and "no fire" in refused.value.message
                started = time.monotonic()
                over_http = http.post("/v1/tenants/acme/schedules", headers=headers, json={"spec": {
                    "kind": spec["kind"], "expression": spec["expression"], "time_zone": spec["time_zone"]}})
                assert time.monotonic() - started < 1.0, "the HTTP API refuses within a second"
                assert over_http.status_code == 422 and over_http.json()["code"] == "INVALID_SPEC", over_http.text
                occurrences.poll(0.2)
        answered = results.until(lambda got: set(sent_ms) <= {r.record["command_id"] for r in got}, timeout=20)
    finally:
        results.close()
        occurrences.close()
    assert occurrences.received, f"the bystander never came\n{env.process.log_tail()}"
    assert due_ms < max(sent_ms.values()) and min(sent_ms.values()) < due_ms, "the raw records span its instant"
    fire = occurrences.received[0]
    assert fire.record["schedule_id"] == "bystander" and fire.record["scheduled_for_ms"] == due_ms
    assert 0 <= fire.timestamp_ms - due_ms < 1000, f"dispatched {fire.timestamp_ms - due_ms} ms late"
    by_id = {r.record["command_id"]: r for r in answered if r.record["command_id"] in sent_ms}
    assert set(by_id) == set(sent_ms), env.process.log_tail()
    for command_id, answer in by_id.items():
        assert answer.record["status"] == "REJECTED" and answer.record["reason"] == "INVALID_SPEC", answer.record
        assert answer.record["message"].startswith("expression: no fire"), answer.record
        assert answer.timestamp_ms - sent_ms[command_id] < 1000, f"{command_id} answered late"
