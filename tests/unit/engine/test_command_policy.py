import time

import pytest
from hypothesis import HealthCheck, given, settings

from pathological_specs import NEVER_FIRING, NOW_MS, never_fires, spring_forward_specs
from scheduler.control.client import make_spec
from scheduler.engine.command_policy import admitted, decide
from scheduler.wire.limits import MAX_NOTE_LENGTH

NOW = 1_800_000_000_000  # 2027-01-15T08:00:00Z


def command(kind, **fields):
    base = {"command_id": f"c-{kind}", "type": kind, "schedule_id": "s1", "tenant": "acme",
            "idempotency_key": None, "expected_version": None, "spec": None, "occurrence_id": None,
            "issued_at_ms": NOW}
    return {**base, **fields}


def created(**spec_fields):
    spec = make_spec("cron", "*/5 * * * *", "Europe/London", **spec_fields)
    decision = decide(command("CREATE", spec=spec, idempotency_key="k1"), None, NOW)
    assert decision.result is None and decision.reserve, "a new schedule waits for its quota slot"
    state, _ = admitted(decision.state, NOW)
    return state


def test_create_waits_for_admission_then_is_active_with_version_1_and_previews_next_fires():
    pending = decide(command("CREATE", spec=make_spec("cron", "*/5 * * * *"), idempotency_key="k1"), None, NOW)
    assert pending.state["state"] == "PENDING" and pending.state["admission_waiters"] == ["c-CREATE"]
    retry = decide(command("CREATE", command_id="c-2", spec=make_spec("cron", "*/5 * * * *"), idempotency_key="k1"),
                   pending.state, NOW)
    assert retry.result is None and retry.state["admission_waiters"] == ["c-CREATE", "c-2"] and not retry.reserve
    assert decide(command("PAUSE"), pending.state, NOW).result["reason"] == "INVALID_STATE"
    state, cursor = admitted(pending.state, NOW)
    assert state["version"] == 1 and state["state"] == "ACTIVE" and cursor == NOW
    assert state["first_next_fires_ms"] == [NOW + 5 * 60_000 * i for i in range(1, 6)]


def test_repeated_create_with_same_idempotency_key_returns_the_first_result_and_changes_nothing():
    state = created()
    again = decide(command("CREATE", command_id="retry", idempotency_key="k1",
                           spec=make_spec("cron", "0 * * * *")), state, NOW + 60_000)
    assert again.state is None
    assert again.result["status"] == "ACCEPTED" and again.result["command_id"] == "retry"
    assert again.result["next_fires_ms"] == state["first_next_fires_ms"]
    assert again.result["processed_at_ms"] == NOW


def test_create_of_an_existing_id_without_the_key_is_rejected():
    state = created()
    result = decide(command("CREATE", spec=make_spec("cron", "0 * * * *")), state, NOW).result
    assert (result["status"], result["reason"]) == ("REJECTED", "ALREADY_EXISTS")


def test_invalid_cron_and_unknown_zone_are_rejected_with_the_field_named():
    bad_cron = decide(command("CREATE", spec=make_spec("cron", "61 * * * *")), None, NOW).result
    assert bad_cron["reason"] == "INVALID_SPEC" and bad_cron["message"].startswith("expression")
    bad_zone = decide(command("CREATE", spec=make_spec("cron", "0 * * * *", "Mars/Base")), None, NOW).result
    assert bad_zone["reason"] == "UNKNOWN_ZONE" and "time_zone" in bad_zone["message"]


def test_bad_tenant_or_schedule_id_is_rejected_before_anything_is_stored():
    spec = make_spec("cron", "0 * * * *")
    assert decide(command("CREATE", tenant="a/b", spec=spec), None, NOW).result["reason"] == "MALFORMED_RECORD"
    assert decide(command("CREATE", schedule_id="x\x00y", spec=spec), None, NOW).state is None


def test_update_bumps_version_invalidates_pending_and_honours_expected_version():
    state = created()
    conflict = decide(command("UPDATE", spec=make_spec("cron", "0 * * * *"), expected_version=7), state, NOW)
    assert conflict.result["reason"] == "VERSION_CONFLICT" and conflict.state is None
    update = decide(command("UPDATE", spec=make_spec("cron", "0 * * * *"), expected_version=1), state, NOW)
    assert update.state["version"] == 2 and update.drop_pending_as == "INVALIDATED"
    assert update.first_fire_after_ms == NOW


def test_another_tenants_schedule_is_unknown():
    state = created()
    result = decide(command("PAUSE", tenant="other"), state, NOW).result
    assert result["reason"] == "UNKNOWN_SCHEDULE"


def test_pause_resume_cancel_lifecycle():
    state = created()
    paused = decide(command("PAUSE"), state, NOW)
    assert paused.state["state"] == "PAUSED" and paused.drop_pending_as == "SKIPPED_PAUSED"
    again = decide(command("PAUSE"), paused.state, NOW)
    assert again.state is None and again.result["status"] == "ACCEPTED"
    resumed = decide(command("RESUME"), paused.state, NOW + 3_600_000)
    assert resumed.state["state"] == "ACTIVE" and resumed.state["version"] == 3
    assert resumed.skipped_while_paused_from_ms == state["next_fire_ms"]
    assert resumed.first_fire_after_ms == NOW + 3_600_000
    canceled = decide(command("CANCEL"), resumed.state, NOW)
    assert canceled.state["state"] == "CANCELED" and canceled.drop_pending_as == "CANCELED"
    assert canceled.release, "a canceled schedule gives its quota slot back"
    assert decide(command("RESUME"), canceled.state, NOW).result["reason"] == "INVALID_STATE"
    assert decide(command("CANCEL"), canceled.state, NOW).result["status"] == "ACCEPTED"


def test_a_pause_keeps_its_note_while_paused_and_resume_or_cancel_clears_it():
    state = created()
    assert state["pause_note"] is None
    paused = decide(command("PAUSE", note="upstream API down"), state, NOW)
    assert paused.state["pause_note"] == "upstream API down" and paused.drop_pending_as == "SKIPPED_PAUSED"
    resumed = decide(command("RESUME"), paused.state, NOW + 60_000)
    assert resumed.state["state"] == "ACTIVE" and resumed.state["pause_note"] is None
    canceled = decide(command("CANCEL"), decide(command("PAUSE", note="x"), state, NOW).state, NOW)
    assert canceled.state["state"] == "CANCELED" and canceled.state["pause_note"] is None
    assert decide(command("PAUSE"), state, NOW).state["pause_note"] is None


def test_a_repeated_pause_changes_only_a_note_it_replaces():
    paused = decide(command("PAUSE", note="first"), created(), NOW).state
    for retry in (command("PAUSE"), command("PAUSE", note="first")):
        again = decide(retry, paused, NOW + 1)
        assert again.state is None and again.result["status"] == "ACCEPTED", "a retry changes nothing"
    renoted = decide(command("PAUSE", note="second"), paused, NOW + 1)
    assert renoted.state["pause_note"] == "second" and renoted.state["state"] == "PAUSED"
    assert renoted.state["version"] == paused["version"] + 1 and renoted.result["version"] == renoted.state["version"]
    assert renoted.drop_pending_as is None and renoted.first_fire_after_ms is None
    conflict = decide(command("PAUSE", note="third", expected_version=1), paused, NOW)
    assert conflict.result["reason"] == "VERSION_CONFLICT"


def test_a_note_longer_than_the_limit_is_rejected_and_changes_nothing():
    state = created()
    rejected = decide(command("PAUSE", note="x" * (MAX_NOTE_LENGTH + 1)), state, NOW)
    assert rejected.result["reason"] == "INVALID_SPEC" and rejected.result["message"].startswith("note:")
    assert rejected.state is None
    assert decide(command("PAUSE", note="x" * MAX_NOTE_LENGTH), state, NOW).state["state"] == "PAUSED"


def test_unknown_command_type_is_rejected():
    assert decide(command("UNKNOWN"), created(), NOW).result["reason"] == "MALFORMED_RECORD"


def test_a_one_shot_just_past_its_instant_still_fires_within_max_lateness():
    spec = make_spec("once", "2027-01-15T07:59:58Z", max_lateness_ms=5_000)
    state, _ = admitted(decide(command("CREATE", spec=spec), None, NOW).state, NOW)
    assert state["first_next_fires_ms"] == [NOW - 2_000]
    stale = make_spec("once", "2027-01-15T07:00:00Z", max_lateness_ms=5_000)
    state, _ = admitted(decide(command("CREATE", spec=stale), None, NOW).state, NOW)
    assert state["first_next_fires_ms"] == []


def test_a_completed_schedule_can_only_be_canceled():
    done = {**created(), "state": "COMPLETED"}
    assert decide(command("UPDATE", spec=make_spec("cron", "0 * * * *")), done, NOW).result["reason"] == "INVALID_STATE"
    canceled = decide(command("CANCEL"), done, NOW)
    assert canceled.state["state"] == "CANCELED" and not canceled.release


@pytest.mark.parametrize("kind", sorted(NEVER_FIRING))
def test_a_raw_create_or_update_with_a_never_firing_spec_is_rejected_within_a_second(kind):
    started = time.monotonic()
    decision = decide(command("CREATE", spec=NEVER_FIRING[kind]), None, NOW)
    update = decide(command("UPDATE", spec=NEVER_FIRING[kind]), created(), NOW)
    assert time.monotonic() - started < 1.0
    for result in (decision.result, update.result):
        assert result["status"] == "REJECTED" and result["reason"] == "INVALID_SPEC"
        assert result["message"].startswith("expression: no fire")
    assert decision.state is None and not decision.reserve and update.state is None


@given(spec=spring_forward_specs())
@settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck), database=None)
def test_fuzz_a_raw_create_is_rejected_exactly_when_its_spec_never_fires(spec):
    started = time.monotonic()
    decision = decide(command("CREATE", spec=spec), None, NOW_MS)
    assert time.monotonic() - started < 1.0
    if never_fires(spec):
        assert decision.result["reason"] == "INVALID_SPEC" and "no fire" in decision.result["message"], spec
    else:
        assert decision.result is None and decision.reserve, (spec, decision.result)
