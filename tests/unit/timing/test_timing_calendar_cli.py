"""`scheduler preview --rrule/--month-end/--calendar`: the grid marks fire days, offset changes and EXDATEs;
`--json` output is the same with or without --calendar."""
from __future__ import annotations

import json

from tests.helpers.preview import run_preview

RULE = "DTSTART:20260301T023000 RRULE:FREQ=WEEKLY;BYDAY=SU EXDATE:20260315"
BERLIN = ["--tz", "Europe/Berlin", "--start", "2026-02-28T00:00:00Z", "--count", "4"]


def test_rrule_preview_prints_instants_like_cron(capsys):
    code, out, err = run_preview(["--rrule", RULE, *BERLIN], capsys)
    assert code == 0 and err == ""
    # Mar 15 is an EXDATE; Mar 29 02:30 is in Berlin's spring-forward gap (skipped by default).
    assert out.splitlines() == ["2026-03-01T01:30:00Z", "2026-03-08T01:30:00Z", "2026-03-22T01:30:00Z",
                                "2026-04-05T00:30:00Z"]


def test_calendar_marks_fire_days_dst_changes_and_exdates(capsys):
    code, out, _ = run_preview(["--rrule", RULE, *BERLIN, "--calendar"], capsys)
    lines = out.splitlines()
    assert code == 0
    assert "March 2026" in lines[2] and lines[3].split() == ["Mo", "Tu", "We", "Th", "Fr", "Sa", "Su"]
    march = lines[lines.index(next(line for line in lines if "March 2026" in line)):]
    grid = "\n".join(march[:8])
    assert " 1*" in grid and " 8*" in grid and "15x" in grid and "22*" in grid and "29 !" in grid
    assert "  ! 2026-03-29 02:00:00 -> 03:00:00  UTC+01:00 -> UTC+02:00  (gap of 1:00:00)" in lines
    assert "  x 2026-03-15 EXDATE" in lines
    assert "  * 2026-04-05 02:30:00 UTC+02:00" in lines


def test_calendar_with_json_keeps_the_json_contract(capsys):
    plain = run_preview(["--cron", "30 2 * * *", "--tz", "America/New_York", "--start", "2026-03-07T00:00:00Z", "--json"],
                 capsys)[1]
    both = run_preview(["--cron", "30 2 * * *", "--tz", "America/New_York", "--start", "2026-03-07T00:00:00Z", "--json",
                 "--calendar"], capsys)[1]
    assert plain == both and all(json.loads(line)["time_zone"] == "America/New_York" for line in both.splitlines())


def test_month_end_option_and_rrule_errors(capsys):
    _, out, _ = run_preview(["--cron", "0 0 31 * *", "--start", "2026-02-01T00:00:00Z", "--count", "1",
                      "--month-end", "clamp"], capsys)
    assert out == "2026-02-28T00:00:00Z\n"
    code, out, err = run_preview(["--rrule", "DTSTART:20260105T090000 RRULE:FREQ=WEEKLY;BYSETPOS=9;BYDAY=MO"], capsys)
    assert code == 2 and out == "" and err.startswith("error: expression: BYSETPOS=9 out of range")


def test_calendar_without_fires_shows_the_start_month(capsys):
    code, out, _ = run_preview(["--cron", "0 0 * * *", "--start", "2026-06-10T00:00:00Z", "--end", "2026-06-10T12:00:00Z",
                         "--calendar"], capsys)
    assert code == 0 and "June 2026" in out and out.rstrip().endswith("(no fires)")
