"""The daily partitions' rules (scheduler/audit/partitions.py): which UTC days ensure creates, which retain drops."""
from __future__ import annotations

from datetime import UTC, datetime

import pytest

from scheduler.audit.partitions import (
    DAY_MS,
    DROP,
    KEEP,
    NOT_DAILY,
    DayRange,
    day_of,
    days_to_create,
    decide,
    planned_days,
)

HOUR_MS = 3_600_000


def ms(text: str) -> int:
    return int(datetime.fromisoformat(text).timestamp() * 1000)


def test_ensure_creates_yesterday_to_a_week_ahead_in_utc_days() -> None:
    days = days_to_create(ms("2026-12-07T03:35:20+00:00"))
    assert [day.suffix for day in days] == [f"p202612{d:02d}" for d in range(6, 15)]
    assert days[0] == DayRange(ms("2026-12-06T00:00:00+00:00"), ms("2026-12-07T00:00:00+00:00"))
    assert all(day.is_daily for day in days)
    assert [b.start_ms for b in days[1:]] == [a.end_ms for a in days[:-1]]  # contiguous, no gap or overlap


def test_days_are_utc_whatever_a_zone_does_on_its_dst_change() -> None:
    """2026-03-29 is 23 hours long in Europe/Berlin and 2026-11-01 25 in New York: a partition is 24 hours."""
    for instant in ("2026-03-29T01:30:00+01:00", "2026-11-01T01:30:00-04:00", "2026-11-01T01:30:00-05:00"):
        day = day_of(ms(instant))
        assert day.end_ms - day.start_ms == DAY_MS and day.start_ms % DAY_MS == 0
        assert datetime.fromtimestamp(day.start_ms / 1000, UTC).hour == 0


def test_an_instant_on_a_boundary_belongs_to_the_day_it_starts() -> None:
    midnight = ms("2026-12-07T00:00:00+00:00")
    assert day_of(midnight).start_ms == midnight
    assert day_of(midnight - 1).end_ms == midnight
    assert day_of(-1) == DayRange(-DAY_MS, 0)  # before the epoch: floor, not truncation
    assert days_to_create(midnight)[0].start_ms == midnight - DAY_MS


def _daily(now_ms: int, first: int, last: int) -> dict[str, DayRange | None]:
    today = day_of(now_ms).start_ms
    found: dict[str, DayRange | None] = {}
    for n in range(first, last + 1):
        day = DayRange(today + n * DAY_MS, today + (n + 1) * DAY_MS)
        found[f"t_{day.suffix}"] = day
    found["t_default"] = None
    return found


def test_retain_drops_only_days_that_end_at_or_before_now_minus_keep() -> None:
    now = ms("2026-12-07T03:00:00+00:00")
    decisions = decide(_daily(now, -10, 7), now, 7 * DAY_MS)  # cutoff 2026-11-30T03:00
    dropped = [d.partition for d in decisions if d.action == DROP]
    assert dropped == ["t_p20261127", "t_p20261128", "t_p20261129"]
    kept = {d.partition: d.reason for d in decisions if d.action == KEEP}
    assert "t_p20261130" in kept  # it ends after the cutoff: its last 21 hours are in the kept window
    assert kept["t_default"] == "DEFAULT partition, never dropped"
    assert decisions[-1].partition == "t_default" and decisions[0].partition == "t_p20261127"


def test_now_minus_keep_exactly_on_a_boundary_drops_the_day_that_ends_there() -> None:
    now = ms("2026-12-07T00:00:00+00:00")
    decisions = {d.partition: d.action for d in decide(_daily(now, -3, 0), now, 2 * DAY_MS)}
    assert decisions["t_p20261204"] == DROP and decisions["t_p20261205"] == KEEP  # upper bound == cutoff: dropped
    assert decide(_daily(now, -3, 0), now - 1, 2 * DAY_MS)[1].action == KEEP  # a millisecond earlier: kept


def test_a_keep_shorter_than_a_day_keeps_the_day_holding_the_cutoff() -> None:
    now = ms("2026-12-07T05:00:00+00:00")
    decisions = {d.partition: d.action for d in decide(_daily(now, -2, 1), now, 6 * HOUR_MS)}  # cutoff Dec 6 23:00
    assert decisions == {"t_p20261205": DROP, "t_p20261206": KEEP, "t_p20261207": KEEP, "t_p20261208": KEEP,
                         "t_default": KEEP}
    # with keep 2h the cutoff is 03:00 today: yesterday goes, and is not created again ahead
    assert [d.partition for d in decide(_daily(now, -2, 1), now, 2 * HOUR_MS) if d.action == DROP] == [
        "t_p20261205", "t_p20261206"]
    assert planned_days(now, set(), 2 * HOUR_MS)[0] == day_of(now)
    assert planned_days(now, set())[0].end_ms == day_of(now).start_ms  # ensure, with no keep, makes yesterday


def test_a_range_that_is_not_one_utc_day_is_never_dropped() -> None:
    now = ms("2026-12-07T00:00:00+00:00")
    found: dict[str, DayRange | None] = {"hand_made": DayRange(0, 2 * DAY_MS),
                                         "shifted": DayRange(HOUR_MS, HOUR_MS + DAY_MS)}
    assert {d.partition: d.action for d in decide(found, now, DAY_MS)} == {"hand_made": NOT_DAILY,
                                                                          "shifted": NOT_DAILY}


def test_days_retain_dropped_are_not_created_again() -> None:
    now = ms("2026-12-07T03:00:00+00:00")
    yesterday = day_of(now).start_ms - DAY_MS
    assert yesterday not in {day.start_ms for day in planned_days(now, {yesterday})}
    assert len(planned_days(now, {yesterday})) == 8


def test_a_negative_keep_is_refused() -> None:
    with pytest.raises(ValueError, match="negative"):
        decide({}, 0, -1)
