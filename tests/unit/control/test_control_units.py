"""Control-plane pieces that need no broker: errors, local validation, dry runs, keys, quotas, request models."""
from __future__ import annotations

import json

import pytest
from pydantic import ValidationError as ModelError

from scheduler.api.keys import KeyStore, create_key, revoke_key
from scheduler.api.models import SpecIn, schedule_json
from scheduler.control.client import (
    CommandTimeout,
    Conflict,
    NotFound,
    QuotaExceeded,
    SchedulerError,
    Unavailable,
    ValidationError,
    VersionConflict,
    dry_run_diff,
    error_for,
    make_spec,
    preview,
    with_anchor,
)
from scheduler.control.tenants import validate_quotas, validate_tenant_name

HOUR_MS = 3_600_000


@pytest.mark.parametrize("reason, kind", [
    ("INVALID_SPEC", ValidationError), ("UNKNOWN_ZONE", ValidationError), ("MALFORMED_RECORD", ValidationError),
    ("UNKNOWN_SCHEDULE", NotFound), ("UNKNOWN_OCCURRENCE", NotFound), ("VERSION_CONFLICT", VersionConflict),
    ("ALREADY_EXISTS", Conflict), ("INVALID_STATE", Conflict), ("QUOTA", QuotaExceeded),
])
def test_every_reject_reason_maps_to_its_typed_error(reason, kind):
    error = error_for(reason, "m")
    assert type(error) is kind and error.reason == reason and isinstance(error, SchedulerError)


def test_unknown_reasons_stay_generic_and_timeouts_are_unavailability():
    assert type(error_for("SOMETHING_NEW", "m")) is SchedulerError
    assert isinstance(CommandTimeout("c"), Unavailable)


def test_preview_is_local_and_bounded():
    assert preview(make_spec("cron", "0 * * * *"), 3, after_ms=0) == [HOUR_MS, 2 * HOUR_MS, 3 * HOUR_MS]
    with pytest.raises(ValidationError):
        preview(make_spec("cron", "0 * * * *"), 5000, after_ms=0)
    with pytest.raises(ValidationError):
        preview(make_spec("cron", "0 * * * *"), 3, after_ms=253_402_300_799_000)


def test_a_rate_without_anchor_counts_from_now_to_the_second():
    spec = with_anchor(make_spec("rate", "every 1h"), 10_500)
    assert spec["anchor_at_ms"] == 10_000
    assert with_anchor(make_spec("cron", "0 * * * *"), 10_500)["anchor_at_ms"] is None


def test_dry_run_diff_shows_both_sides_with_the_fires_already_counted():
    state = {"schedule_id": "s", "version": 4, "state": "ACTIVE", "fired_count": 1,
             "spec": make_spec("cron", "0 * * * *", max_fires=3)}
    diff = dry_run_diff(state, make_spec("cron", "30 * * * *", max_fires=3), 0, count=5)
    assert diff["before_ms"] == [HOUR_MS, 2 * HOUR_MS]
    assert diff["after_ms"] == [HOUR_MS // 2, 3 * HOUR_MS // 2]


def test_keys_are_stored_hashed_verified_and_revocable(tmp_path):
    path = tmp_path / "keys.json"
    tenant_key, admin_key = create_key(path, "acme"), create_key(path, None)
    stored = path.read_text()
    assert tenant_key.split("_", 2)[2] not in stored and admin_key.split("_", 2)[2] not in stored
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    store = KeyStore(path)
    acme, admin = store.verify(tenant_key), store.verify(admin_key)
    assert acme is not None and acme.may_access("acme") and not acme.may_access("globex") and not acme.admin
    assert admin is not None and admin.admin and admin.may_access("globex")
    for bad in ("", "sk_", "sk_nope_x", tenant_key[:-1], "Bearer " + tenant_key):
        assert store.verify(bad) is None
    key_id = tenant_key.split("_")[1]
    assert revoke_key(path, key_id) and not revoke_key(path, key_id)
    assert KeyStore(path).verify(tenant_key) is None
    assert set(json.loads(path.read_text())["keys"]) == {admin_key.split("_")[1]}


def test_tenant_names_and_quotas_are_checked():
    validate_tenant_name("acme-1.eu")
    for bad in ("", "a/b", "..", "x" * 101):
        with pytest.raises(ValidationError):
            validate_tenant_name(bad)
    assert validate_quotas({"max_active_schedules": 5.0, "trigger_rate_per_s": 2}) == {
        "max_active_schedules": 5, "trigger_rate_per_s": 2.0}
    for bad in ({"max_active_schedules": -1}, {"max_concurrency": 0}, {"nope": 1}, {"trigger_rate_per_s": float("nan")},
                {"retry_budget_per_min": 1.5}, {"max_active_schedules": True}, {"max_concurrency": 2**40}):
        with pytest.raises(ValidationError):
            validate_quotas(bad)


def test_spec_bodies_are_bounded_and_map_to_spec_records():
    record = SpecIn(kind="RATE", expression="every 1h", payload_base64="AAE=").record()
    assert record["payload"] == b"\x00\x01" and record["max_attempts"] == 3
    for bad in ({"max_attempts": 2**40}, {"start_at_ms": 2**62}, {"kind": "WEEKLY"}, {"surprise": 1}):
        with pytest.raises(ModelError):
            SpecIn(**{"kind": "CRON", "expression": "0 * * * *", **bad})
    with pytest.raises(ValidationError):
        SpecIn(kind="CRON", expression="0 * * * *", payload="a", payload_base64="AA==").record()


def test_schedule_json_carries_binary_payloads_as_base64():
    state = {"schedule_id": "s", "spec": make_spec("cron", "0 * * * *", payload=b"\xff")}
    out = schedule_json(state)
    assert out["spec"]["payload"] is None and out["spec"]["payload_base64"] == "/w=="
    assert schedule_json({"schedule_id": "s", "spec": make_spec("cron", "0 * * * *", payload=b"hi")})[
        "spec"]["payload"] == "hi"


def test_spec_bodies_accept_rrule_and_month_end():
    record = SpecIn(kind="RRULE", expression="DTSTART:20260113T090000 RRULE:FREQ=MONTHLY;BYDAY=2TU",
                    time_zone="Europe/Berlin", month_end="CLAMP").record()
    assert record["kind"] == "RRULE" and record["month_end"] == "CLAMP"
    with pytest.raises(ModelError):
        SpecIn(kind="CRON", expression="0 0 31 * *", month_end="WRAP")
