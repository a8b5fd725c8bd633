"""`schedules apply|export` without a broker: reading the file, keying its entries, the plan, the round trip."""
from __future__ import annotations

import json

import pytest

from scheduler.control.apply_cli import plan_json, plan_text
from scheduler.control.apply_plan import (
    export_text,
    file_format,
    plan_apply,
    raw_entries,
    read_entries,
)
from scheduler.control.cli_common import spec_value_text as shown
from scheduler.control.client import make_spec
from scheduler.control.errors import ValidationError

NOW = 1_780_000_000_000  # 2026-05-28


def state(tenant: str, schedule_id: str, spec: dict, status: str = "ACTIVE", version: int = 1) -> dict:
    return {"tenant": tenant, "schedule_id": schedule_id, "state": status, "version": version, "spec": spec}


def entries_of(text: str, fmt: str = "jsonl", tenant: str | None = None):
    return read_entries(raw_entries(text, fmt), tenant)


def live_of(*states: dict) -> dict:
    return {(s["tenant"], s["schedule_id"]): s for s in states}


NIGHTLY = make_spec("CRON", "0 2 * * *", "Asia/Tokyo", max_lateness_ms=600_000, payload=b"{}")
HOURLY = make_spec("RATE", "every 1h", anchor_at_ms=NOW - 3_600_000)


def test_export_then_apply_is_nothing_to_do_in_both_formats():
    live = live_of(state("acme", "nightly", NIGHTLY), state("acme", "hourly", HOURLY, "PAUSED", 4),
                   state("acme", "binary", {**HOURLY, "payload": b"\xff\x00"}))
    for fmt in ("jsonl", "yaml"):
        entries, unread = entries_of(export_text(live.values(), fmt), fmt)
        plan = plan_apply(entries, unread, live, "cancel", {"acme"}, NOW)
        assert (plan.changes, plan.rejections, plan.unchanged) == ([], [], 3), fmt
        assert plan_text(plan, False) == "3 entries: nothing to do (3 unchanged)"


def test_export_writes_only_live_schedules_and_only_fields_off_their_default():
    text = export_text([state("acme", "b", NIGHTLY), state("acme", "a", HOURLY, "CANCELED")], "jsonl")
    assert [json.loads(line) for line in text.splitlines()] == [{"tenant": "acme", "schedule_id": "b", "spec": {
        "kind": "CRON", "expression": "0 2 * * *", "time_zone": "Asia/Tokyo", "max_lateness_ms": 600000,
        "payload": "{}"}}]


def test_an_edited_entry_is_an_update_with_its_diff_and_a_new_one_a_create():
    text = "\n".join([
        json.dumps({"schedule_id": "nightly", "spec": {"kind": "CRON", "expression": "0 3 * * *",
                                                       "time_zone": "Asia/Tokyo", "payload": "{}"}}),
        "",
        json.dumps({"schedule_id": "fresh", "spec": {"kind": "RATE", "expression": "every 5m"}}),
    ])
    entries, unread = entries_of(text, tenant="acme")
    plan = plan_apply(entries, unread, live_of(state("acme", "nightly", NIGHTLY, version=3)), None, {"acme"}, NOW)
    update, create = sorted(plan.changes, key=lambda c: c.action, reverse=True)
    assert (update.action, update.version, update.line) == ("update", 3, 1)
    assert update.diff == {"expression": ("0 2 * * *", "0 3 * * *"), "max_lateness_ms": (600_000, 300_000)}
    assert (create.action, create.schedule_id, create.line) == ("create", "fresh", 3)
    text = plan_text(plan, dry_run=True)
    assert text.splitlines()[0] == "dry run, nothing sent:"
    assert "    expression: '0 2 * * *' -> '0 3 * * *'" in text and "    max_lateness_ms: 10m -> 5m" in text
    assert text.splitlines()[-1] == "2 entries: 1 to be created, 1 to be updated, 0 unchanged, 0 rejected"
    assert plan_json(plan, True)["changes"][0]["diff"]["max_lateness_ms"] == [600_000, 300_000]


def test_a_rate_entry_without_anchor_keeps_the_anchor_the_scheduler_chose():
    entries, unread = entries_of(json.dumps({"tenant": "acme", "schedule_id": "hourly",
                                             "spec": {"kind": "RATE", "expression": "every 1h"}}))
    plan = plan_apply(entries, unread, live_of(state("acme", "hourly", HOURLY)), None, {"acme"}, NOW)
    assert plan.unchanged == 1 and plan.changes == []


def test_prune_cancels_or_pauses_what_the_file_no_longer_lists_in_its_tenants_only():
    live = live_of(state("acme", "nightly", NIGHTLY), state("acme", "gone", HOURLY),
                   state("acme", "paused", HOURLY, "PAUSED"), state("acme", "done", HOURLY, "CANCELED"),
                   state("globex", "other", HOURLY))
    entries, unread = entries_of(export_text([live[("acme", "nightly")]], "jsonl"))
    cancel = plan_apply(entries, unread, live, "cancel", {"acme"}, NOW)
    assert [(c.action, c.schedule_id) for c in cancel.changes] == [("cancel", "gone"), ("cancel", "paused")]
    pause = plan_apply(entries, unread, live, "pause", {"acme"}, NOW)
    assert [(c.action, c.schedule_id) for c in pause.changes] == [("pause", "gone")]
    assert plan_apply(entries, unread, live, None, {"acme"}, NOW).changes == []


def test_an_unreadable_entry_stops_the_prune_and_is_rejected_with_its_number():
    live = live_of(state("acme", "nightly", NIGHTLY))
    entries, unread = entries_of('{"tenant": "acme", "schedule_id": "nightly", "spec": {"kind": "CRON"}}\nnot json')
    plan = plan_apply(entries, unread, live, "cancel", {"acme"}, NOW)
    assert plan.changes == [] and plan.prune_skipped
    assert [(r.line, r.reason) for r in plan.rejections] == [(1, "INVALID_SPEC"), (2, "MALFORMED_RECORD")]
    assert "prune skipped" in plan_text(plan, False)


@pytest.mark.parametrize("entry, reason, says", [
    ({"tenant": "acme", "spec": {"kind": "CRON", "expression": "0 2 * * *"}}, "MALFORMED_RECORD", "keys each entry"),
    ({"schedule_id": "x", "spec": {"kind": "CRON", "expression": "0 2 * * *"}}, "MALFORMED_RECORD", "tenant"),
    ({"tenant": "acme", "schedule_id": "x", "spec": {"kind": "CRON", "expression": "0 2 * *"}}, "INVALID_SPEC", ""),
    ({"tenant": "acme", "schedule_id": "x", "colour": "red", "spec": {"kind": "CRON", "expression": "0 2 * * *"}},
     "MALFORMED_RECORD", "colour"),
])
def test_bad_entries_are_rejected_with_a_reason(entry, reason, says):
    entries, unread = entries_of(json.dumps(entry))
    plan = plan_apply(entries, unread, {}, None, {"acme"}, NOW)
    assert plan.changes == [] and [r.reason for r in plan.rejections] == [reason]
    assert says in plan.rejections[0].message


def test_the_same_schedule_twice_and_a_finished_schedule_changed_are_rejected():
    line = {"tenant": "acme", "schedule_id": "nightly", "spec": {"kind": "CRON", "expression": "0 4 * * *"}}
    entries, unread = entries_of(json.dumps(line) + "\n" + json.dumps(line))
    plan = plan_apply(entries, unread, live_of(state("acme", "nightly", NIGHTLY, "CANCELED")), None, {"acme"}, NOW)
    assert sorted((r.line, r.reason) for r in plan.rejections) == [(1, "INVALID_STATE"), (2, "DUPLICATE")]


def test_an_idempotency_key_keys_an_entry_as_create_derives_its_id():
    entries, _ = entries_of(json.dumps({"tenant": "acme", "idempotency_key": "k",
                                        "spec": {"kind": "CRON", "expression": "0 2 * * *"}}))
    from scheduler.control.client import SchedulerClient
    assert entries[0].schedule_id == SchedulerClient.create_id("acme", None, "k")


def test_yaml_takes_a_list_or_one_entry_per_document_and_refuses_what_is_not_yaml():
    listed = "- tenant: acme\n  schedule_id: a\n  spec: {kind: CRON, expression: '0 2 * * *'}\n"
    documents = "tenant: acme\nschedule_id: a\nspec: {kind: CRON, expression: '0 2 * * *'}\n---\n" \
                "tenant: acme\nschedule_id: b\nspec: {kind: CRON, expression: '0 2 * * *'}\n"
    assert [e.schedule_id for e in entries_of(listed, "yaml")[0]] == ["a"]
    assert [e.schedule_id for e in entries_of(documents, "yaml")[0]] == ["a", "b"]
    with pytest.raises(ValidationError, match="not YAML"):
        list(raw_entries("a: [", "yaml"))


def test_the_format_follows_the_file_name_unless_given():
    assert [file_format(p, None) for p in ("s.yaml", "S.YML", "s.jsonl", "-")] == ["yaml", "yaml", "jsonl", "jsonl"]
    assert file_format("s.yaml", "jsonl") == "jsonl"


def test_values_are_shown_the_human_way():
    assert shown("max_lateness_ms", 300_000) == "5m" and shown("run_timeout_ms", 5_400_000) == "1h30m"
    assert shown("start_at_ms", 0) == "1970-01-01T00:00:00Z" and shown("end_at_ms", None) == "-"
    assert shown("payload", b"{}") == "'{}'" and shown("payload", b"\xff").startswith("base64:")
