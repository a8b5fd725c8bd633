"""The import file's lines: parsing, the derived idempotency key, duplicates and blank lines."""
from __future__ import annotations

import json

import pytest

from scheduler.control.errors import ValidationError
from scheduler.control.schedule_import import DUPLICATE, ImportSummary, parse_line, read_requests


def test_a_line_becomes_the_create_request_schedules_create_would_send():
    request = parse_line(json.dumps({"tenant": "acme", "schedule_id": "nightly", "spec": {
        "kind": "CRON", "expression": "0 2 * * *", "time_zone": "Asia/Tokyo", "payload": "{}"}}))
    assert (request.tenant, request.schedule_id) == ("acme", "nightly")
    assert request.spec["time_zone"] == "Asia/Tokyo" and request.spec["payload"] == b"{}"
    assert request.spec["overlap_policy"] is not None  # the schema's defaults fill the rest


def test_the_derived_key_depends_on_the_content_not_on_its_spelling():
    compact = '{"tenant":"acme","spec":{"kind":"RATE","expression":"every 90m"}}'
    spaced = '{ "spec": {"expression": "every 90m", "kind": "RATE"},  "tenant": "acme" }'
    other = '{"tenant":"acme","spec":{"kind":"RATE","expression":"every 91m"}}'
    assert parse_line(compact).idempotency_key == parse_line(spaced).idempotency_key
    assert parse_line(compact).idempotency_key != parse_line(other).idempotency_key
    given = parse_line('{"tenant":"acme","idempotency_key":"k1","spec":{"kind":"RATE","expression":"every 9m"}}')
    assert given.idempotency_key == "k1"


@pytest.mark.parametrize("text, reason, where", [
    ("{not json", "MALFORMED_RECORD", "line"),
    ('{"spec": {"kind": "CRON", "expression": "0 2 * * *"}}', "MALFORMED_RECORD", "tenant"),
    ('{"tenant": "a", "spec": {"kind": "CRON", "expression": "0 2 * * *", "colour": 1}}', "INVALID_SPEC",
     "spec.colour"),
    ('{"tenant": "a", "spec": {"kind": "WEEKLY", "expression": "x"}}', "INVALID_SPEC", "spec.kind"),
    ('{"tenant": "a", "extra": 1, "spec": {"kind": "CRON", "expression": "0 2 * * *"}}', "MALFORMED_RECORD",
     "extra"),
])
def test_a_line_the_model_refuses_names_the_field(text, reason, where):
    with pytest.raises(ValidationError) as caught:
        parse_line(text)
    assert caught.value.reason == reason and caught.value.message.startswith(f"{where}: ")


def test_bad_and_duplicate_lines_are_reported_with_their_numbers_blank_lines_skipped():
    good = '{"tenant": "acme", "schedule_id": "s1", "spec": {"kind": "CRON", "expression": "0 2 * * *"}}'
    lines = [good, "", "   ", "{oops", good.replace("0 2", "0 3"), good]
    summary, numbers = ImportSummary(), []
    requests = list(read_requests(lines, summary, numbers))
    assert [r.schedule_id for r in requests] == ["s1"] and numbers == [1]
    assert summary.lines == 4
    assert [(r.line, r.reason) for r in summary.rejections] == [(4, "MALFORMED_RECORD"), (5, DUPLICATE),
                                                                  (6, DUPLICATE)]
    assert "line 1" in summary.rejections[1].message
