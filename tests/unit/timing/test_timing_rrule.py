"""RRULE, W/LW and month_end by example: the calendars the issue names, the DST contract on
transition days, EXDATE, and validation errors that name the offending part."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from scheduler.timing.errors import SpecError
from scheduler.timing.fires import count_fires, excluded_between, next_fires
from scheduler.timing.misfire import resolve_misfire
from scheduler.timing.spec import parse_spec

UTC = timezone.utc
JAN_2026 = datetime(2026, 1, 1, tzinfo=UTC)


def local_fires(kind, expression, zone="UTC", after=JAN_2026, count=6, **options):
    spec = parse_spec(kind, expression, zone, **options)
    return [f"{f.scheduled_for.astimezone(spec_zone(zone)):%Y-%m-%d %H:%M %a}"
            for f in next_fires(spec, after, count)]


def spec_zone(zone):
    from zoneinfo import ZoneInfo

    return ZoneInfo(zone)


def instants(spec, after, count=4):
    return [(f"{f.scheduled_for:%Y-%m-%dT%H:%M}Z", f.dst_rule) for f in next_fires(spec, after, count)]


def test_the_calendars_cron_cannot_say():
    assert local_fires("rrule", "DTSTART:20260113T090000 RRULE:FREQ=MONTHLY;BYDAY=2TU", count=3) == [
        "2026-01-13 09:00 Tue", "2026-02-10 09:00 Tue", "2026-03-10 09:00 Tue"]
    assert local_fires("rrule", "DTSTART:20260105T080000 RRULE:FREQ=WEEKLY;INTERVAL=3;BYDAY=MO", count=3) == [
        "2026-01-05 08:00 Mon", "2026-01-26 08:00 Mon", "2026-02-16 08:00 Mon"]
    last_business_day_of_quarter = "RRULE:FREQ=MONTHLY;BYMONTH=3,6,9,12;BYDAY=MO,TU,WE,TH,FR;BYSETPOS=-1"
    assert local_fires("rrule", f"DTSTART:20260101T170000 {last_business_day_of_quarter}", "Europe/Paris",
                       count=4) == ["2026-03-31 17:00 Tue", "2026-06-30 17:00 Tue", "2026-09-30 17:00 Wed",
                                    "2026-12-31 17:00 Thu"]
    assert local_fires("rrule", "DTSTART:20260131T090000 RRULE:FREQ=MONTHLY", count=3, month_end="clamp") == [
        "2026-01-31 09:00 Sat", "2026-02-28 09:00 Sat", "2026-03-31 09:00 Tue"]
    assert local_fires("rrule", "DTSTART:20260131T090000 RRULE:FREQ=MONTHLY", count=2) == [
        "2026-01-31 09:00 Sat", "2026-03-31 09:00 Tue"]  # RFC 5545: invalid dates are skipped


def test_cron_nearest_weekday_last_weekday_and_clamp():
    assert local_fires("cron", "0 9 15W * *", count=3, after=datetime(2026, 2, 1, tzinfo=UTC)) == [
        "2026-02-16 09:00 Mon", "2026-03-16 09:00 Mon", "2026-04-15 09:00 Wed"]  # Feb 15, Mar 15: Sundays
    assert local_fires("cron", "0 9 1W * *", count=1, after=datetime(2026, 8, 1, tzinfo=UTC)) == [
        "2026-08-03 09:00 Mon"]  # Aug 1 is a Saturday: W never leaves the month
    assert local_fires("cron", "0 18 LW * *", count=2) == ["2026-01-30 18:00 Fri", "2026-02-27 18:00 Fri"]
    assert local_fires("cron", "0 0 31 * *", count=3) == [
        "2026-01-31 00:00 Sat", "2026-03-31 00:00 Tue", "2026-05-31 00:00 Sun"]
    assert local_fires("cron", "0 0 31 * *", count=3, month_end="clamp") == [
        "2026-01-31 00:00 Sat", "2026-02-28 00:00 Sat", "2026-03-31 00:00 Tue"]
    assert local_fires("cron", "0 0 30 2 *", count=2, month_end="clamp") == [
        "2026-02-28 00:00 Sat", "2027-02-28 00:00 Sun"]


def test_rrule_follows_the_cron_dst_contract_on_transition_days():
    daily = "DTSTART:20260306T023000 RRULE:FREQ=DAILY"
    after = datetime(2026, 3, 7, 12, tzinfo=UTC)
    ny = "America/New_York"
    assert instants(parse_spec("rrule", daily, ny), after, 2) == [("2026-03-09T06:30Z", None),
                                                                  ("2026-03-10T06:30Z", None)]
    assert instants(parse_spec("rrule", daily, ny, dst_gap="shift"), after, 1) == [("2026-03-08T07:00Z", "gap_shifted")]
    fall = "DTSTART:20261030T013000 RRULE:FREQ=DAILY"
    after = datetime(2026, 11, 1, tzinfo=UTC)
    assert instants(parse_spec("rrule", fall, ny, dst_overlap="both"), after, 3) == [
        ("2026-11-01T05:30Z", "overlap_both"), ("2026-11-01T06:30Z", "overlap_both"), ("2026-11-02T06:30Z", None)]
    assert instants(parse_spec("rrule", fall, ny, dst_overlap="last"), after, 1) == [("2026-11-01T06:30Z", "overlap_last")]
    # Apia skipped 2011-12-30 entirely: skip loses that day, shift fires at the first instant after it.
    apia = "DTSTART:20111228T100000 RRULE:FREQ=DAILY"
    after = datetime(2011, 12, 29, 0, tzinfo=UTC)
    assert instants(parse_spec("rrule", apia, "Pacific/Apia"), after, 2) == [
        ("2011-12-29T20:00Z", None), ("2011-12-30T20:00Z", None)]  # Dec 31 at UTC+14
    assert instants(parse_spec("rrule", apia, "Pacific/Apia", dst_gap="shift"), after, 2) == [
        ("2011-12-29T20:00Z", None), ("2011-12-30T10:00Z", "gap_shifted")]


def test_count_counts_the_rule_s_dates_before_exdate_and_the_dst_contract():
    """RFC 5545: COUNT bounds the rule's recurrence set; EXDATE then takes dates out, and a
    gap-skipped wall time is a date of the set that simply does not fire."""
    spec = parse_spec("rrule", "DTSTART:20260307T023000 RRULE:FREQ=DAILY;COUNT=4 EXDATE:20260309",
                      "America/New_York")
    assert instants(spec, JAN_2026, 5) == [("2026-03-07T07:30Z", None), ("2026-03-10T06:30Z", None)]
    assert [f.scheduled_for for f in excluded_between(spec, JAN_2026, datetime(2027, 1, 1, tzinfo=UTC))] == [
        datetime(2026, 3, 9, 6, 30, tzinfo=UTC)]
    assert count_fires(spec, JAN_2026, datetime(2027, 1, 1, tzinfo=UTC)) == 2


def test_exdate_forms_and_until():
    base = "DTSTART;TZID=Europe/Berlin:20261221T090000 RRULE:FREQ=DAILY;UNTIL=20261229T080000Z"
    for exdate in ("EXDATE:20261224,20261225", "EXDATE;TZID=Europe/Berlin:20261224T090000,20261225T090000",
                   "EXDATE:20261224T080000Z EXDATE;VALUE=DATE:20261225"):
        got = local_fires("rrule", f"{base} {exdate}", "Europe/Berlin", count=10)
        assert got == ["2026-12-21 09:00 Mon", "2026-12-22 09:00 Tue", "2026-12-23 09:00 Wed",
                       "2026-12-26 09:00 Sat", "2026-12-27 09:00 Sun", "2026-12-28 09:00 Mon",
                       "2026-12-29 09:00 Tue"], exdate


def test_misfire_arithmetic_works_unchanged_on_rrule_schedules():
    spec = parse_spec("rrule", "DTSTART:20260101T090000 RRULE:FREQ=WEEKLY;BYDAY=MO,WE,FR", "Asia/Tokyo")
    decision = resolve_misfire(spec, JAN_2026, datetime(2026, 3, 1, tzinfo=UTC), timedelta(minutes=5), "CATCH_UP", 3)
    assert len(decision.fire) == 3 and decision.missed_count == count_fires(spec, JAN_2026, datetime(2026, 3, 1, tzinfo=UTC)) - 3


@pytest.mark.parametrize("expression, message", [
    ("DTSTART:20260105T090000 RRULE:FREQ=WEEKLY;BYDAY=MO;BYSETPOS=9", "BYSETPOS=9 out of range"),
    ("DTSTART:20260105T090000 RRULE:FREQ=MONTHLY;BYDAY=MO;BYSETPOS=9", "BYSETPOS=9 out of range"),
    ("DTSTART:20260105T090000 RRULE:FREQ=MONTHLY;BYDAY=6MO", "BYDAY=6MO out of range"),
    ("DTSTART:20260105T090000 RRULE:FREQ=WEEKLY;BYDAY=2MO", "BYDAY=2MO: an ordinal weekday needs"),
    ("DTSTART:20260105T090000 RRULE:FREQ=MONTHLY;BYMONTHDAY=0", "BYMONTHDAY=0 out of range"),
    ("DTSTART:20260105T090000 RRULE:FREQ=MONTHLY;BYMONTHDAY=32", "BYMONTHDAY=32 out of range"),
    ("DTSTART:20260105T090000 RRULE:FREQ=YEARLY;BYMONTH=13", "BYMONTH=13 out of range"),
    ("DTSTART:20260105T090000 RRULE:FREQ=YEARLY;BYMONTH=2;BYMONTHDAY=30", "never yields"),
    ("DTSTART:20260105T090000 RRULE:FREQ=DAILY;UNTIL=20250101", "UNTIL"),
    ("DTSTART:20260105T090000 RRULE:FREQ=DAILY;COUNT=3;UNTIL=20270101", "COUNT and UNTIL"),
    ("DTSTART:20260105T090000 RRULE:FREQ=HOURLY", "FREQ=HOURLY: not supported"),
    ("DTSTART:20260105T090000 RRULE:FREQ=DAILY;BYHOUR=9,17", "BYHOUR: not supported"),
    ("DTSTART:20260105T090000 RRULE:FREQ=DAILY;BYSECOND=5", "BYSECOND: not supported"),
    ("DTSTART:20260105T090000 RRULE:FREQ=DAILY RDATE:20260301T090000", "RDATE: not supported"),
    ("DTSTART:20260105T090000 RRULE:FREQ=DAILY;FOO=1", "FOO: unknown rule part"),
    ("DTSTART:20260105T090000 RRULE:FREQ=DAILY;INTERVAL=0", "INTERVAL=0 out of range"),
    ("DTSTART:20260105T090000 RRULE:FREQ=WEEKLY;BYMONTHDAY=1", "BYMONTHDAY: not allowed with FREQ=WEEKLY"),
    ("DTSTART:20260105T090000 RRULE:FREQ=DAILY;BYSETPOS=1", "BYSETPOS: needs another BY part"),
    ("DTSTART:20260105T090000 RRULE:FREQ=DAILY EXDATE:20260106T100000", "EXDATE=20260106T100000: is not at"),
    ("DTSTART;TZID=Asia/Tokyo:20260105T090000 RRULE:FREQ=DAILY", "TZID=Asia/Tokyo: differs"),
    ("DTSTART:20260230T090000 RRULE:FREQ=DAILY", "DTSTART=20260230T090000"),
    ("RRULE:FREQ=DAILY", "DTSTART: exactly one"),
    ("DTSTART:20260105T090000", "RRULE: exactly one"),
    ("DTSTART:20260105T090000 RRULE:INTERVAL=2", "FREQ: required"),
])
def test_invalid_rules_name_the_offending_part(expression, message):
    with pytest.raises(SpecError) as raised:
        parse_spec("rrule", expression, "Europe/Berlin")
    assert raised.value.field == "expression" and message in raised.value.message, raised.value.message


@pytest.mark.parametrize("expression, message", [
    ("0 0 1W,15W * *", "W takes a single day"),
    ("0 0 1-5W * *", "W follows a single day"),
    ("0 0 32W * *", "32 is outside 1-31"),
])
def test_invalid_w_fields_are_rejected(expression, message):
    with pytest.raises(SpecError, match=message):
        parse_spec("cron", expression)


def test_month_end_is_validated():
    with pytest.raises(SpecError) as raised:
        parse_spec("cron", "0 0 31 * *", month_end="wrap")
    assert raised.value.field == "month_end"
