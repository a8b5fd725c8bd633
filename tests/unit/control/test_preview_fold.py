"""`scheduler preview` is an alias of `schedules preview` (scheduler/control/preview_cli.py): the two names
compute the same instants through one path, each keeps its own output form, and `schedules preview` gained
what only the alias had (the calendar, the refusal of a spec that never fires). Run in-process, no broker."""
from __future__ import annotations

import json

import pytest

from scheduler.cli import build_parser, main

# Specs that cross DST changes (a gap, an overlap), an EXDATE, a month end and a rate.
SPECS = [
    ["--cron", "30 2 * * *", "--tz", "America/New_York"],
    ["--cron", "30 1 * * *", "--tz", "Europe/London", "--dst-overlap", "both"],
    ["--cron", "0 9 31 * *", "--tz", "Asia/Tokyo", "--month-end", "clamp"],
    ["--rrule", "DTSTART:20260301T023000 RRULE:FREQ=WEEKLY;BYDAY=SU EXDATE:20260315", "--tz", "Europe/Berlin"],
    ["--every", "90m"],
    ["--cron", "30 2 * * *", "--tz", "America/New_York", "--dst-gap", "shift"],
]
START = "2026-02-27T00:00:00Z"


@pytest.fixture(autouse=True)
def _no_tenant(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SCHEDULER_TENANT", raising=False)


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("spec", SPECS)
def test_both_names_print_the_same_instants(spec: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    code, alias_out, _ = _run(["preview", *spec, "--start", START, "--count", "40"], capsys)
    assert code == 0
    code, verb_out, err = _run(["schedules", "preview", *spec, "--start", START, "--after", START, "--count", "40"],
                               capsys)
    assert (code, err) == (0, "")
    assert verb_out == alias_out and len(alias_out.splitlines()) == 40


def test_each_name_keeps_its_json_form(capsys: pytest.CaptureFixture[str]) -> None:
    spec = ["--at", "2026-11-01T01:30:00", "--tz", "America/New_York"]
    _, alias_out, _ = _run(["preview", *spec, "--dst-overlap", "both", "--json"], capsys)
    assert [json.loads(line)["utc_offset"] for line in alias_out.splitlines()] == ["-04:00", "-05:00"]
    _, verb_out, _ = _run(["schedules", "preview", *spec, "--dst-overlap", "both", "--after", "0", "-o", "json"],
                          capsys)
    assert json.loads(verb_out) == [1793511000000, 1793514600000]
    _, jsonl_out, _ = _run(["schedules", "preview", *spec, "--dst-overlap", "both", "--after", "0", "-o", "jsonl"],
                           capsys)
    assert jsonl_out.splitlines() == ["1793511000000", "1793514600000"]


def test_schedules_preview_draws_the_calendar(capsys: pytest.CaptureFixture[str]) -> None:
    rule = ["--rrule", "DTSTART:20260301T023000 RRULE:FREQ=WEEKLY;BYDAY=SU EXDATE:20260315", "--tz", "Europe/Berlin"]
    window = ["--count", "4", "--calendar"]
    _, alias_out, _ = _run(["preview", *rule, "--start", "2026-02-28T00:00:00Z", *window], capsys)
    code, verb_out, _ = _run(["schedules", "preview", *rule, "--after", "2026-02-28T00:00:00Z", *window], capsys)
    assert code == 0 and verb_out == alias_out
    assert "  x 2026-03-15 EXDATE" in verb_out.splitlines()


def test_schedules_preview_refuses_a_spec_that_never_fires_as_create_would(capsys: pytest.CaptureFixture[str]) -> None:
    never = ["--at", "2027-03-28T01:30:00", "--tz", "Europe/Dublin"]  # inside Dublin's spring-forward gap
    code, out, err = _run(["preview", *never], capsys)
    assert (code, out) == (2, "") and err.startswith("error: expression: no fire")
    code, out, err = _run(["schedules", "preview", *never, "--after", "2026-12-04T00:00:00Z"], capsys)
    assert (code, out) == (2, "") and err.startswith("error: INVALID_SPEC: expression: no fire"), err


def test_alias_errors_keep_their_form(capsys: pytest.CaptureFixture[str]) -> None:
    assert _run(["preview", "--cron", "* * * * *", "--count", "-1"], capsys)[2] == "error: count: must not be negative\n"
    code, _, err = _run(["preview", "--cron", "* * * * *", "--end", "soon"], capsys)
    assert code == 2 and err.startswith("error: end_at: ")


def test_help_names_the_alias() -> None:
    assert "alias of `schedules preview`" in " ".join(build_parser().format_help().split())
