"""Named calendar and DST cases from issue 3, each checked against hand-derived instants."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
from croniter import croniter

from scheduler.timing.fires import next_fires
from scheduler.timing.spec import parse_spec

UTC = timezone.utc


def _utc(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=UTC)


def _fires(expression, zone, after, count, kind="cron", **options):
    spec = parse_spec(kind, expression, zone, **options)
    return [(f.scheduled_for, f.dst_rule) for f in next_fires(spec, after, count)]


def _local_dates(fires, zone):
    return [u.astimezone(ZoneInfo(zone)).date().isoformat() for u, _ in fires]


def test_apia_day_that_never_happened_is_skipped():
    fires = _fires("0 12 * * *", "Pacific/Apia", _utc(2011, 12, 28), 3)
    assert _local_dates(fires, "Pacific/Apia") == ["2011-12-28", "2011-12-29", "2011-12-31"]
    assert fires[1][0] == _utc(2011, 12, 29, 22)  # noon at UTC-10
    assert fires[2][0] == _utc(2011, 12, 30, 22)  # noon at UTC+14, 24 h later
    assert all(rule is None for _, rule in fires)


def test_apia_missing_day_shifted_lands_on_the_jump():
    fires = _fires("0 12 * * *", "Pacific/Apia", _utc(2011, 12, 29, 23), 2, dst_gap="shift")
    assert fires == [(_utc(2011, 12, 30, 10), "gap_shifted"), (_utc(2011, 12, 30, 22), None)]


def test_havana_midnight_gap():
    after = _utc(2026, 3, 6, 12)
    skipped = _fires("0 0 * * *", "America/Havana", after, 3)
    assert _local_dates(skipped, "America/Havana") == ["2026-03-07", "2026-03-09", "2026-03-10"]
    shifted = _fires("0 0 * * *", "America/Havana", after, 3, dst_gap="shift")
    assert shifted[1] == (_utc(2026, 3, 8, 5), "gap_shifted")  # 01:00 CDT, the first instant after the gap
    assert shifted[1][0].astimezone(ZoneInfo("America/Havana")).hour == 1


def test_havana_midnight_overlap_options():
    after = _utc(2026, 10, 31, 12)
    assert _fires("30 0 1 11 *", "America/Havana", after, 1) == [(_utc(2026, 11, 1, 4, 30), "overlap_first")]
    assert _fires("30 0 1 11 *", "America/Havana", after, 1, dst_overlap="last") == [(_utc(2026, 11, 1, 5, 30), "overlap_last")]
    assert _fires("30 0 1 11 *", "America/Havana", after, 2, dst_overlap="both") == [
        (_utc(2026, 11, 1, 4, 30), "overlap_both"),
        (_utc(2026, 11, 1, 5, 30), "overlap_both"),
    ]


def test_lord_howe_thirty_minute_gap():
    after = _utc(2026, 10, 2)
    assert _local_dates(_fires("15 2 * * *", "Australia/Lord_Howe", after, 2), "Australia/Lord_Howe") == [
        "2026-10-03",
        "2026-10-05",
    ]
    shifted = _fires("15 2 * * *", "Australia/Lord_Howe", after, 2, dst_gap="shift")
    assert shifted[1] == (_utc(2026, 10, 3, 15, 30), "gap_shifted")  # 02:30 +11:00
    assert _fires("*/15 2 4 10 *", "Australia/Lord_Howe", after, 2) == [
        (_utc(2026, 10, 3, 15, 30), None),  # 02:30 +11
        (_utc(2026, 10, 3, 15, 45), None),  # 02:45 +11
    ]


def test_lord_howe_thirty_minute_overlap_fires_twice_thirty_minutes_apart():
    fires = _fires("45 1 5 4 *", "Australia/Lord_Howe", _utc(2026, 4, 1), 2, dst_overlap="both")
    assert fires == [(_utc(2026, 4, 4, 14, 45), "overlap_both"), (_utc(2026, 4, 4, 15, 15), "overlap_both")]


def test_tokyo_daily_nine_has_no_dst():
    for option in ("first", "last", "both"):
        fires = _fires("0 9 * * *", "Asia/Tokyo", _utc(2026, 3, 1), 400, dst_overlap=option, dst_gap="shift")
        assert [u for u, _ in fires] == [_utc(2026, 3, 1) + timedelta(days=d) for d in range(1, 401)]
        assert {rule for _, rule in fires} == {None}


def test_month_end_l():
    fires = _fires("0 0 L * *", "UTC", _utc(2027, 12, 15), 6)
    assert [u.date().isoformat() for u, _ in fires] == [
        "2027-12-31", "2028-01-31", "2028-02-29", "2028-03-31", "2028-04-30", "2028-05-31",
    ]


def test_feb_29_skips_non_leap_years_including_2100():
    fires = _fires("0 6 29 2 *", "Europe/London", _utc(2025, 1, 1), 3)
    assert [u for u, _ in fires] == [_utc(2028, 2, 29, 6), _utc(2032, 2, 29, 6), _utc(2036, 2, 29, 6)]
    assert [u for u, _ in _fires("0 6 29 2 *", "UTC", _utc(2096, 3, 1), 1)] == [_utc(2104, 2, 29, 6)]


def test_last_friday_and_second_friday():
    assert [u.date().isoformat() for u, _ in _fires("15 10 * * 5L", "UTC", _utc(2026, 1, 1), 3)] == [
        "2026-01-30", "2026-02-27", "2026-03-27",
    ]
    assert _fires("15 10 * * 5L", "UTC", _utc(2026, 1, 1), 3) == _fires("15 10 * * L5", "UTC", _utc(2026, 1, 1), 3)
    assert [u.date().isoformat() for u, _ in _fires("0 12 * * FRI#2", "UTC", _utc(2026, 1, 1), 3)] == [
        "2026-01-09", "2026-02-13", "2026-03-13",
    ]


def test_vixie_or_when_both_day_fields_are_restricted():
    days = [u.day for u, _ in _fires("0 0 13 * FRI", "UTC", _utc(2026, 4, 1), 5)]
    assert days == [3, 10, 13, 17, 24]  # April 2026 Fridays, plus Monday the 13th


def test_star_day_field_counts_as_unrestricted_so_both_must_match():
    dates = [u.date().isoformat() for u, _ in _fires("0 0 */2 * FRI", "UTC", _utc(2026, 4, 1), 4)]
    assert dates == ["2026-04-03", "2026-04-17", "2026-05-01", "2026-05-15"]


def test_fixed_rate_24h_is_elapsed_time_across_dst():
    anchor = _utc(2026, 3, 6, 14)  # 09:00 EST
    fires = _fires("every 24h", "America/New_York", anchor, 4, kind="rate", anchor_at=anchor)
    assert [u for u, _ in fires] == [anchor + timedelta(days=d) for d in range(1, 5)]
    local_hours = [u.astimezone(ZoneInfo("America/New_York")).hour for u, _ in fires]
    assert local_hours == [9, 10, 10, 10]  # the wall clock moves, the interval does not


def test_croniter_does_not_follow_our_dst_contract():
    """Contrast (croniter 5.x): it shifts a gap time into the gap day and, resumed from inside
    a repeated hour, returns the first 01:30 again, so a cursor loop would fire it twice."""
    zone = ZoneInfo("America/New_York")
    start = datetime(2026, 3, 8, tzinfo=zone)
    theirs = croniter("30 2 * * *", start).get_next(datetime)
    assert theirs.astimezone(UTC) == _utc(2026, 3, 8, 7, 30)  # 03:30 EDT, a shifted 02:30
    ours = _fires("30 2 * * *", "America/New_York", start.astimezone(UTC), 1)
    assert ours == [(_utc(2026, 3, 9, 6, 30), None)]  # the gap day is skipped

    resumed = _utc(2026, 11, 1, 6, 10)  # 01:10 EST, after 01:30 EDT already fired at 05:30Z
    again = croniter("30 1 * * *", resumed.astimezone(zone)).get_next(datetime)
    assert again.astimezone(UTC) <= resumed  # croniter hands back the already-fired 01:30
    assert _fires("30 1 * * *", "America/New_York", resumed, 1) == [(_utc(2026, 11, 2, 6, 30), None)]


def test_croniter_agrees_with_us_away_from_dst():
    for expression in ("*/5 * * * *", "0 9 * * MON-FRI", "0 0 L * *", "0 12 * * FRI#2", "15 10 * * L5", "0 0 1,15 * *"):
        start = _utc(2026, 1, 1)
        it = croniter(expression, start)
        theirs = [it.get_next(datetime) for _ in range(20)]
        assert [u for u, _ in _fires(expression, "UTC", start, 20)] == theirs, expression


@pytest.mark.parametrize(
    ("macro", "equivalent"),
    [("@hourly", "0 * * * *"), ("@daily", "0 0 * * *"), ("@midnight", "0 0 * * *"), ("@weekly", "0 0 * * 0"),
     ("@monthly", "0 0 1 * *"), ("@yearly", "0 0 1 1 *"), ("@annually", "0 0 1 1 *")],
)
def test_macros(macro, equivalent):
    after = _utc(2026, 2, 27, 13, 7)
    assert _fires(macro, "Europe/London", after, 5) == _fires(equivalent, "Europe/London", after, 5)


def test_names_ranges_steps_lists_and_sunday_seven():
    after = _utc(2026, 1, 1)
    assert _fires("0 0 * * 7", "UTC", after, 5) == _fires("0 0 * * SUN", "UTC", after, 5)
    assert _fires("0 0 * JAN-MAR/2 mon,Fri", "UTC", after, 30) == _fires("0 0 * 1,3 1,5", "UTC", after, 30)
    assert [u.minute for u, _ in _fires("10-30/10,45 8 * * *", "UTC", after, 4)] == [10, 20, 30, 45]
    assert _fires("0 0 * * FRI-SUN", "UTC", after, 6) == _fires("0 0 * * 5,6,0", "UTC", after, 6)
