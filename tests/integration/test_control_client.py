"""The Python client against a running scheduler on the real broker: every operation and error path."""
from __future__ import annotations

import time
import uuid

import pytest
from control_env import control_env, hourly
from engine_harness import FakeWorker

from scheduler.control.client import (
    CommandTimeout,
    Conflict,
    NotFound,
    SchedulerClient,
    ValidationError,
    VersionConflict,
    make_spec,
)


@pytest.fixture(scope="module")
def env(kafka_bootstrap, tmp_path_factory):
    yield from control_env(kafka_bootstrap, tmp_path_factory.mktemp("client"))


@pytest.fixture
def client(env):
    return env.plane.client


def sid() -> str:
    return f"s-{uuid.uuid4().hex[:8]}"


def test_create_get_list_update_pause_resume_cancel(client):
    schedule_id = sid()
    created = client.create("acme", hourly(payload=b"p"), schedule_id=schedule_id)
    assert created["status"] == "ACCEPTED" and created["version"] == 1 and len(created["next_fires_ms"]) == 5
    state = client.get("acme", schedule_id)
    assert state["state"] == "ACTIVE" and state["spec"]["payload"] == b"p"
    assert schedule_id in [s["schedule_id"] for s in client.list("acme")]
    assert schedule_id not in [s["schedule_id"] for s in client.list("globex")]

    updated = client.update("acme", schedule_id, hourly(payload=b"q"), expected_version=1)
    assert updated["version"] == 2 and client.get("acme", schedule_id)["spec"]["payload"] == b"q"
    assert client.pause("acme", schedule_id)["version"] == 3
    assert client.get("acme", schedule_id)["state"] == "PAUSED"
    assert [s["schedule_id"] for s in client.list("acme", state="PAUSED")].count(schedule_id) == 1
    assert client.resume("acme", schedule_id, expected_version=3)["version"] == 4
    assert client.cancel("acme", schedule_id)["version"] == 5
    assert client.get("acme", schedule_id)["state"] == "CANCELED"


def test_a_pause_note_stays_on_the_schedule_until_resume(client):
    schedule_id = sid()
    client.create("acme", hourly(), schedule_id=schedule_id)
    assert client.pause("acme", schedule_id, note="upstream API down")["version"] == 2
    assert client.get("acme", schedule_id)["pause_note"] == "upstream API down"
    assert client.pause("acme", schedule_id, note="still down")["version"] == 3, "a new note is a change"
    assert client.pause("acme", schedule_id)["version"] == 3, "a repeated pause without a note changes nothing"
    assert client.get("acme", schedule_id)["pause_note"] == "still down"
    with pytest.raises(ValidationError):
        client.pause("acme", schedule_id, note="x" * 1001)
    client.resume("acme", schedule_id)
    state = client.get("acme", schedule_id)
    assert (state["state"], state["pause_note"]) == ("ACTIVE", None)


def test_a_repeated_create_with_the_same_idempotency_key_creates_nothing_new(client):
    key = f"daily-{uuid.uuid4()}"
    first = client.create("acme", hourly(), idempotency_key=key)
    again = client.create("acme", hourly(), idempotency_key=key)
    assert again["schedule_id"] == first["schedule_id"] and again["next_fires_ms"] == first["next_fires_ms"]
    assert client.get("acme", first["schedule_id"])["version"] == 1


def test_dry_run_update_shows_fires_before_and_after_and_sends_nothing(env, client):
    schedule_id = sid()
    client.create("acme", hourly(), schedule_id=schedule_id)
    before = env.commands_end()
    diff = client.update("acme", schedule_id, make_spec("cron", "30 * * * *", "Europe/Paris"), dry_run=True,
                         count=3)
    assert env.commands_end() == before
    assert len(diff["before_ms"]) == len(diff["after_ms"]) == 3
    assert all(ms % 3_600_000 == 0 for ms in diff["before_ms"])
    assert all(ms % 3_600_000 == 1_800_000 for ms in diff["after_ms"])
    assert client.get("acme", schedule_id)["version"] == 1
    with pytest.raises(VersionConflict):
        client.update("acme", schedule_id, hourly(), expected_version=7, dry_run=True)


def test_local_validation_rejects_before_sending(env, client):
    before = env.commands_end()
    with pytest.raises(ValidationError) as bad_cron:
        client.create("acme", make_spec("cron", "61 * * * *"))
    with pytest.raises(ValidationError) as bad_zone:
        client.create("acme", make_spec("cron", "0 * * * *", "Mars/Olympus"))
    with pytest.raises(ValidationError):
        client.create("no/slash", hourly())
    with pytest.raises(ValidationError):
        client.backfill("acme", "x", 2000, 1000)
    with pytest.raises(ValidationError):
        client.backfill("acme", "x", 1000, int(time.time() * 1000) + 3_600_000)
    assert (bad_cron.value.reason, bad_zone.value.reason) == ("INVALID_SPEC", "UNKNOWN_ZONE")
    assert env.commands_end() == before


def test_engine_rejections_map_to_typed_errors(client):
    schedule_id = sid()
    client.create("acme", hourly(), schedule_id=schedule_id)
    with pytest.raises(NotFound) as unknown:
        client.pause("acme", sid())
    assert unknown.value.reason == "UNKNOWN_SCHEDULE"
    with pytest.raises(NotFound):
        client.pause("globex", schedule_id)  # another tenant's schedule does not exist for it
    with pytest.raises(NotFound):
        client.get("globex", schedule_id)
    with pytest.raises(VersionConflict):
        client.update("acme", schedule_id, hourly(), expected_version=9)
    with pytest.raises(Conflict) as exists:
        client.create("acme", hourly(), schedule_id=schedule_id)
    assert exists.value.reason == "ALREADY_EXISTS"
    with pytest.raises(ValidationError) as malformed:
        client.create("acme", hourly(), schedule_id="x" * 300)
    assert malformed.value.reason == "MALFORMED_RECORD"
    client.cancel("acme", schedule_id)
    with pytest.raises(Conflict) as canceled:
        client.resume("acme", schedule_id)
    assert canceled.value.reason == "INVALID_STATE"


def test_a_command_without_a_result_times_out(env):
    with SchedulerClient(env.bootstrap, env.prefix, timeout_s=1) as quick:
        with pytest.raises(CommandTimeout):
            quick.wait([str(uuid.uuid4())])


def test_trigger_now_dispatches_one_occurrence_at_once(env, client):
    schedule_id = sid()
    client.create("acme", hourly(), schedule_id=schedule_id)
    reader = env.occurrences(("acme",))
    try:
        sent_ms = int(time.time() * 1000)
        result = client.trigger_now("acme", schedule_id)
        assert len(result["next_fires_ms"]) == 1 and abs(result["next_fires_ms"][0] - sent_ms) < 10_000
        got = reader.until(lambda rs: any(r.record["schedule_id"] == schedule_id for r in rs), timeout=20)
    finally:
        reader.close()
    mine = [r.record for r in got if r.record["schedule_id"] == schedule_id]
    assert [o["scheduled_for_ms"] for o in mine] == result["next_fires_ms"]
    with pytest.raises(NotFound):
        client.trigger_now("globex", schedule_id)


def test_backfill_replays_the_fires_of_a_past_range_through_catch_up(env, client):
    schedule_id = sid()
    now_ms = int(time.time() * 1000)
    start_ms = now_ms - now_ms % 1000 - 60_000
    client.create("acme", make_spec("rate", "every 1s", anchor_at_ms=start_ms - 2_000_000), schedule_id=schedule_id)
    reader = env.occurrences(("acme",))
    try:
        result = client.backfill("acme", schedule_id, start_ms, start_ms + 9_000, overlap_override="ALLOW")
        assert result["next_fires_ms"] == [start_ms + i * 1000 for i in range(10)]
        got = reader.until(lambda rs: sum(r.record["catch_up"] and r.record["schedule_id"] == schedule_id
                                          for r in rs) >= 10, timeout=30)
    finally:
        reader.close()
    replayed = sorted(r.record["scheduled_for_ms"] for r in got
                      if r.record["schedule_id"] == schedule_id and r.record["catch_up"])
    assert replayed == result["next_fires_ms"]
    with pytest.raises(ValidationError):  # 1001 fires: bounded
        client.backfill("acme", schedule_id, start_ms - 1_000_000, start_ms)
    with pytest.raises(NotFound):
        client.backfill("globex", schedule_id, start_ms, start_ms + 1000)


def test_rerun_of_a_finished_occurrence_and_its_errors(env, client):
    schedule_id = sid()
    client.create("acme", hourly(), schedule_id=schedule_id)
    reader = env.occurrences(("acme",))
    try:
        client.trigger_now("acme", schedule_id)
        first = reader.until(lambda rs: any(r.record["schedule_id"] == schedule_id for r in rs), timeout=20)
        occurrence = next(r.record for r in first if r.record["schedule_id"] == schedule_id)
        FakeWorker(env.bootstrap, env.prefix).run(occurrence, "SUCCEEDED")
        deadline = time.monotonic() + 20
        view = client.occurrence_view()
        while (view.get("acme", occurrence["occurrence_id"]) or {}).get("state") != "SUCCEEDED":
            assert time.monotonic() < deadline, "the status view never showed the success"
            time.sleep(0.2)
        assert client.occurrence("acme", occurrence["occurrence_id"])["schedule_id"] == schedule_id
        with pytest.raises(NotFound):
            client.occurrence("globex", occurrence["occurrence_id"])
        assert client.rerun("acme", occurrence["occurrence_id"])["status"] == "ACCEPTED"
        again = reader.until(lambda rs: sum(r.record["schedule_id"] == schedule_id for r in rs) >= 2, timeout=20)
    finally:
        reader.close()
    mine = [r.record for r in again if r.record["schedule_id"] == schedule_id]
    assert [o["occurrence_id"] for o in mine] == [occurrence["occurrence_id"]] * 2 and mine[1]["attempt"] == 2
    with pytest.raises(NotFound):
        client.rerun("acme", "0" * 32)
    with pytest.raises(NotFound):
        client.rerun("globex", occurrence["occurrence_id"], schedule_id)
