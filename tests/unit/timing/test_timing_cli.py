"""`scheduler preview` output contract: exact lines on stdout, status 2 and the bad field on stderr."""
from __future__ import annotations

import json

import pytest
from tests.helpers.preview import run_preview


def test_cron_preview_prints_exactly_n_instants(capsys):
    code, out, err = run_preview(["--cron", "30 2 * * *", "--tz", "America/New_York", "--start", "2026-03-07T00:00:00Z",
                           "--count", "5"], capsys)
    assert code == 0 and err == ""
    assert out.splitlines() == [
        "2026-03-07T07:30:00Z", "2026-03-09T06:30:00Z", "2026-03-10T06:30:00Z",
        "2026-03-11T06:30:00Z", "2026-03-12T06:30:00Z",
    ]


def test_every_is_anchored_at_start_and_strictly_after_it(capsys):
    code, out, _ = run_preview(["--every", "90m", "--start", "2026-03-07T00:00:00Z", "--count", "3"], capsys)
    assert code == 0
    assert out.splitlines() == ["2026-03-07T01:30:00Z", "2026-03-07T03:00:00Z", "2026-03-07T04:30:00Z"]


def test_at_with_local_time_and_overlap_both_as_json(capsys):
    code, out, _ = run_preview(["--at", "2026-11-01T01:30:00", "--tz", "America/New_York", "--dst-overlap", "both",
                         "--json"], capsys)
    rows = [json.loads(line) for line in out.splitlines()]
    assert code == 0
    assert [(r["scheduled_for"], r["local"], r["utc_offset"], r["dst_rule"]) for r in rows] == [
        ("2026-11-01T05:30:00Z", "2026-11-01T01:30:00", "-04:00", "overlap_both"),
        ("2026-11-01T06:30:00Z", "2026-11-01T01:30:00", "-05:00", "overlap_both"),
    ]


def test_at_instant_and_end_and_max_fires(capsys):
    assert run_preview(["--at", "2026-05-01T10:00:00+02:00"], capsys)[1] == "2026-05-01T08:00:00Z\n"
    code, out, _ = run_preview(["--cron", "0 * * * *", "--start", "2026-01-01T00:00:00Z", "--end", "2026-01-01T03:00:00Z",
                         "--count", "10"], capsys)
    assert out.splitlines() == ["2026-01-01T01:00:00Z", "2026-01-01T02:00:00Z", "2026-01-01T03:00:00Z"]
    code, out, _ = run_preview(["--cron", "0 * * * *", "--start", "2026-01-01T00:00:00Z", "--max-fires", "2"], capsys)
    assert len(out.splitlines()) == 2


def test_dst_gap_shift_option(capsys):
    _, out, _ = run_preview(["--cron", "30 2 * * *", "--tz", "America/New_York", "--start", "2026-03-07T12:00:00Z",
                      "--count", "1", "--dst-gap", "shift"], capsys)
    assert out == "2026-03-08T07:00:00Z\n"


@pytest.mark.parametrize(
    ("argv", "field"),
    [
        (["--cron", "30 2 * * *", "--tz", "Mars/Base", "--start", "2026-03-07T00:00:00Z"], "time_zone"),
        (["--cron", "30 25 * * *", "--start", "2026-03-07T00:00:00Z"], "expression"),
        (["--every", "soon", "--start", "2026-03-07T00:00:00Z"], "expression"),
        (["--cron", "* * * * *", "--start", "yesterday"], "start_at"),
        (["--at", "2026-13-01T00:00:00Z"], "expression"),
    ],
)
def test_errors_exit_2_and_name_the_field(argv, field, capsys):
    code, out, err = run_preview(argv, capsys)
    assert code == 2 and out == ""
    assert err.startswith(f"error: {field}: ")


def test_unknown_zone_message(capsys):
    _, _, err = run_preview(["--cron", "* * * * *", "--tz", "Mars/Base", "--start", "2026-03-07T00:00:00Z"], capsys)
    assert err.strip() == "error: time_zone: unknown IANA time zone 'Mars/Base'"
