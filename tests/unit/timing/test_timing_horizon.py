"""The search horizon (scheduler/timing/horizon.py): no spec makes the time core walk the calendar unbounded.

A pathological spec of every kind is answered within a second by every search (next fires, counts,
n-th fire, misfire, EXDATE skips) and a spec that never fires is refused by `require_fire`, while
legitimately sparse specs (February 29 on a weekday, every 4 years) keep every fire. Timings are
measured cold (the zone's transition tables and the compiled timelines dropped first): the bound is
generous, since what matters is that the search ends.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime, timedelta, timezone

import pytest
from tests.helpers.preview import run_preview

from scheduler.timing import fires as fires_module
from scheduler.timing.fires import (
    count_fires,
    excluded_between,
    fires_between,
    next_fire,
    next_fires,
    nth_fire,
    require_fire,
)
from scheduler.timing.horizon import SEARCH_HORIZON_YEARS
from scheduler.timing.misfire import resolve_misfire
from scheduler.timing.spec import ScheduleSpec, SpecError, parse_spec
from scheduler.timing.zones import _year_table

UTC = timezone.utc
NOW = datetime(2026, 12, 4, tzinfo=UTC)
YEAR_9000 = datetime(9000, 1, 1, tzinfo=UTC)
DUBLIN_GAP_RRULE = "DTSTART:20260329T015400 RRULE:FREQ=YEARLY;BYMONTH=3;BYDAY=-1SU"

PATHOLOGICAL = {
    # the last Sunday of March at 01:30 / 01:54 in Dublin: always inside the EU spring-forward gap
    "cron": parse_spec("cron", "30 1 * 3 0L", "Europe/Dublin"),
    "rrule": parse_spec("rrule", DUBLIN_GAP_RRULE, "Europe/Dublin"),
    # every second since year 2: billions of fires before now, each search still arithmetic
    "rate": parse_spec("rate", "every 1s", anchor_at=datetime(2, 1, 1, tzinfo=UTC)),
    # a local one-shot inside the gap
    "once": parse_spec("once", "2027-03-28T01:30:00", "Europe/Dublin"),
}


def _cold() -> None:
    """Forget every cached table, so a test pays the full cost of its first search."""
    _year_table.cache_clear()
    fires_module.timeline.cache_clear()
    fires_module._fires_between.cache_clear()


def _within_a_second(search: Callable[[], object]) -> object:
    started = time.monotonic()
    answer = search()
    elapsed = time.monotonic() - started
    assert elapsed < 1.0, f"took {elapsed:.2f} s"
    return answer


@pytest.mark.parametrize("kind", sorted(PATHOLOGICAL))
def test_every_search_of_a_pathological_spec_is_answered_within_a_second(kind):
    spec = PATHOLOGICAL[kind]
    searches: dict[str, Callable[[], object]] = {
        "next_fires": lambda: next_fires(spec, NOW, 10),
        "next_fire from year 2": lambda: next_fire(spec, datetime(2, 1, 2, tzinfo=UTC)),
        "fires_between": lambda: fires_between(spec, NOW, YEAR_9000, 10),
        "count_fires": lambda: count_fires(spec, NOW, YEAR_9000),
        "nth_fire": lambda: nth_fire(spec, NOW, 1_000_000),
        "misfire": lambda: resolve_misfire(spec, NOW, NOW + timedelta(days=3650), timedelta(seconds=60),
                                           "CATCH_UP", 5),
    }
    for search in searches.values():
        _cold()
        _within_a_second(search)
    if kind == "rrule":
        _within_a_second(lambda: excluded_between(spec, NOW, YEAR_9000))
    if kind != "rate":
        assert next_fires(spec, NOW, 10) == [] and count_fires(spec, NOW, YEAR_9000) == 0


@pytest.mark.parametrize("kind", ["cron", "rrule", "once"])
def test_a_spec_that_never_fires_under_its_dst_options_is_refused_within_a_second(kind):
    _cold()
    with pytest.raises(SpecError) as refused:
        _within_a_second(lambda: require_fire(PATHOLOGICAL[kind], NOW))
    assert refused.value.field == "expression"
    expected = "no fire: " if kind == "once" else f"no fire in the next {SEARCH_HORIZON_YEARS} years after"
    assert expected in refused.value.message


def test_a_rate_always_fires():
    require_fire(PATHOLOGICAL["rate"], NOW)
    assert next_fire(PATHOLOGICAL["rate"], NOW).scheduled_for == NOW + timedelta(seconds=1)


@pytest.mark.parametrize("kind", ["cron", "rrule", "once"])
def test_the_same_spec_with_dst_gap_shift_fires_at_the_gaps_end(kind):
    spec = PATHOLOGICAL[kind]
    shifted = parse_spec(spec.kind, spec.expression, spec.time_zone, dst_gap="shift")
    require_fire(shifted, NOW if kind != "once" else datetime(2, 1, 2, tzinfo=UTC))
    fire = next_fire(shifted, NOW)
    assert fire.scheduled_for == datetime(2027, 3, 28, 1, 0, tzinfo=UTC) and fire.dst_rule == "gap_shifted"


SPARSE = [
    # February 29 every year: 2096, then 2104 (2100 is no leap year)
    (parse_spec("cron", "0 12 29 2 *", "Europe/Berlin"), datetime(2096, 3, 1, tzinfo=UTC),
     datetime(2104, 2, 29, 11, tzinfo=UTC)),
    # the fifth Monday of February is a Monday February 29: 2072, then 40 years to 2112
    (parse_spec("cron", "0 0 * 2 MON#5", "America/New_York"), datetime(2072, 3, 1, tzinfo=UTC),
     datetime(2112, 2, 29, 5, tzinfo=UTC)),
    # the same in an RRULE
    (parse_spec("rrule", "DTSTART:20260101T000000 RRULE:FREQ=YEARLY;BYMONTH=2;BYMONTHDAY=29;BYDAY=MO",
                "America/New_York"), datetime(2072, 3, 1, tzinfo=UTC), datetime(2112, 2, 29, 5, tzinfo=UTC)),
    # every 4 years on February 29 from 2028: 2096, then 2104
    (parse_spec("rrule", "DTSTART:20280229T090000 RRULE:FREQ=YEARLY;INTERVAL=4", "UTC"),
     datetime(2096, 3, 1, tzinfo=UTC), datetime(2104, 2, 29, 9, tzinfo=UTC)),
]


@pytest.mark.parametrize(("spec", "after", "expected"), SPARSE)
def test_a_legitimately_sparse_spec_keeps_every_fire(spec, after, expected):
    require_fire(spec, after)
    assert next_fire(spec, after).scheduled_for == expected
    assert count_fires(spec, after, expected) == 1
    assert nth_fire(spec, after, 1).scheduled_for == expected
    assert len(next_fires(spec, after, 3)) == 3


def test_a_fire_further_away_than_the_horizon_is_not_found_and_such_a_spec_is_refused():
    every_century = parse_spec("rrule", "DTSTART:20200101T090000 RRULE:FREQ=YEARLY;INTERVAL=100", "UTC")
    require_fire(every_century, datetime(2019, 1, 1, tzinfo=UTC))
    assert [f.scheduled_for.year for f in next_fires(every_century, datetime(2019, 1, 1, tzinfo=UTC), 3)] == [2020]
    assert count_fires(every_century, datetime(2019, 1, 1, tzinfo=UTC), YEAR_9000) == 1
    with pytest.raises(SpecError, match="no fire in the next"):
        require_fire(every_century, NOW)


def test_a_schedule_whose_fires_run_out_ends_its_searches_at_once():
    ended = parse_spec("rrule", "DTSTART:20260105T090000 RRULE:FREQ=WEEKLY;UNTIL=20260301", "Europe/Dublin")
    counted = parse_spec("rrule", "DTSTART:20260105T090000 RRULE:FREQ=DAILY;COUNT=3", "Europe/Dublin")
    window = parse_spec("cron", "30 1 * * *", "Europe/Dublin", end_at=datetime(2026, 6, 1, tzinfo=UTC))
    for spec in (ended, counted, window):
        _cold()
        assert _within_a_second(lambda spec=spec: next_fires(spec, NOW, 10)) == []
        assert _within_a_second(lambda spec=spec: nth_fire(spec, NOW, 1)) is None
    with pytest.raises(SpecError, match="its days end"):
        require_fire(ended, NOW)
    require_fire(window, NOW)  # a window closing before the first fire is accepted, as before


def test_require_fire_counts_from_start_at_when_it_is_later():
    later = parse_spec("cron", "30 1 * 3 0L", "Europe/Dublin", start_at=datetime(2200, 1, 1, tzinfo=UTC))
    with pytest.raises(SpecError, match="after 2200-01-01T00:00:00Z"):
        require_fire(later, NOW)
    fine = parse_spec("cron", "0 9 * * *", "Europe/Dublin", start_at=datetime(2200, 1, 1, tzinfo=UTC))
    require_fire(fine, NOW)


def test_a_gap_free_spec_is_untouched_by_the_horizon():
    daily: ScheduleSpec = parse_spec("cron", "30 1 * * *", "Europe/Dublin")
    fires = next_fires(daily, NOW, 400)
    assert len(fires) == 400 and datetime(2027, 3, 28, 1, 30, tzinfo=UTC) not in [f.scheduled_for for f in fires]
    assert count_fires(daily, NOW, NOW + timedelta(days=365 * 60)) == count_fires(
        daily, NOW, NOW + timedelta(days=365 * 30)) + count_fires(
        daily, NOW + timedelta(days=365 * 30), NOW + timedelta(days=365 * 60))


@pytest.mark.parametrize("argv", [
    ["--cron", "30 1 * 3 0L"],
    ["--rrule", DUBLIN_GAP_RRULE],
    ["--at", "2027-03-28T01:30:00"],
])
def test_scheduler_preview_of_a_never_firing_spec_says_why_within_a_second(argv, capsys):
    _cold()
    code, out, err = _within_a_second(
        lambda: run_preview([*argv, "--tz", "Europe/Dublin", "--start", "2026-12-04T00:00:00Z"], capsys))
    assert code == 2 and out == ""
    assert err.startswith("error: expression: no fire"), err


def test_scheduler_preview_of_a_window_closed_before_the_first_fire_still_prints_nothing(capsys):
    code, out, err = run_preview(["--cron", "0 9 * * *", "--start", "2026-12-04T10:00:00Z",
                                  "--end", "2026-12-05T08:00:00Z"], capsys)
    assert (code, out, err) == (0, "", "")
