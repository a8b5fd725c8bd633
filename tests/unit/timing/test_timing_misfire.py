"""Misfire policies against a brute-force decision over enumerated fires, plus the year-long outage."""
from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.timing.fires import fires_between
from scheduler.timing.misfire import resolve_misfire
from scheduler.timing.spec import parse_spec

UTC = timezone.utc


def _brute(spec, cursor, now, max_lateness, policy, k, fired_before, enumerate_limit):
    candidates = fires_between(spec, cursor, now, None, fired_before)
    late = [f for f in candidates if now - f.scheduled_for > max_lateness]
    on_time = [f for f in candidates if now - f.scheduled_for <= max_lateness]
    fired_late = {"SKIP": 0, "FIRE_ONCE": min(1, len(late)), "CATCH_UP": min(k, len(late))}[policy]
    missed = late[: len(late) - fired_late]
    return {
        "fire": late[len(missed):] + on_time,
        "missed": missed[max(0, len(missed) - enumerate_limit):],
        "missed_count": len(missed),
        "missed_first": missed[0].scheduled_for if missed else None,
        "missed_last": missed[-1].scheduled_for if missed else None,
    }


@settings(max_examples=80, deadline=None)
@given(
    st.sampled_from(["*/7 * * * *", "0 1-3 * * *", "30 2 * * *", "*/30 0-3 * 3,10,11 *"]),
    st.sampled_from(["America/New_York", "Europe/London", "Australia/Lord_Howe", "UTC"]),
    st.sampled_from(["first", "both"]),
    st.integers(0, 400) .map(lambda d: datetime(2026, 1, 1, tzinfo=UTC) + timedelta(hours=d * 6, minutes=d % 59)),
    st.integers(0, 72 * 60),
    st.integers(0, 6 * 60),
    st.sampled_from(["SKIP", "FIRE_ONCE", "CATCH_UP"]),
    st.integers(0, 5),
    st.one_of(st.none(), st.integers(1, 40)),
    st.integers(0, 10),
    st.integers(0, 8),
)
def test_policies_match_brute_force(expression, zone, overlap, cursor, span, lateness, policy, k, max_fires,
                                    fired_before, enumerate_limit):
    spec = parse_spec("cron", expression, zone, dst_overlap=overlap, max_fires=max_fires)
    now = cursor + timedelta(minutes=span, seconds=17)
    max_lateness = timedelta(minutes=lateness)
    got = resolve_misfire(spec, cursor, now, max_lateness, policy, k, fired_before, enumerate_limit)
    want = _brute(spec, cursor, now, max_lateness, policy, k, fired_before, enumerate_limit)
    assert got.fire == want["fire"]
    assert got.missed == want["missed"]
    assert (got.missed_count, got.missed_first, got.missed_last) == (
        want["missed_count"], want["missed_first"], want["missed_last"])
    assert got.cursor == now


def test_every_minute_down_for_a_year_is_fast_and_exact():
    spec = parse_spec("cron", "* * * * *", "America/New_York")
    cursor, now = datetime(2025, 3, 1, tzinfo=UTC), datetime(2026, 3, 1, 0, 0, 30, tzinfo=UTC)
    minutes_in_year = 365 * 1440  # one spring gap hour lost, one fall repeat fired once: net -60
    expected_total = minutes_in_year - 60
    for policy, fired_late in (("SKIP", 0), ("FIRE_ONCE", 1), ("CATCH_UP", 10)):
        started = time.perf_counter()
        decision = resolve_misfire(spec, cursor, now, timedelta(minutes=5), policy, 10)
        assert time.perf_counter() - started < 1.0
        on_time = 5  # 23:56 .. 00:00
        assert len(decision.fire) == fired_late + on_time
        assert decision.missed_count == expected_total - fired_late - on_time
        assert len(decision.missed) == 1000
        assert decision.missed_first == datetime(2025, 3, 1, 0, 1, tzinfo=UTC)
        assert decision.missed_last == decision.missed[-1].scheduled_for
        assert decision.fire[-1].scheduled_for == datetime(2026, 3, 1, tzinfo=UTC)


def test_fire_once_fires_the_latest_late_fire():
    spec = parse_spec("cron", "0 * * * *")
    cursor = datetime(2026, 1, 1, tzinfo=UTC)
    decision = resolve_misfire(spec, cursor, cursor + timedelta(hours=10, minutes=30), timedelta(minutes=10),
                               "FIRE_ONCE", 0)
    assert [f.scheduled_for.hour for f in decision.fire] == [10]
    assert [f.scheduled_for.hour for f in decision.missed] == list(range(1, 10))


def test_catch_up_keeps_the_latest_k_in_order_and_on_time_fires_always_fire():
    spec = parse_spec("cron", "*/10 * * * *")
    cursor = datetime(2026, 1, 1, tzinfo=UTC)
    now = cursor + timedelta(hours=2)
    decision = resolve_misfire(spec, cursor, now, timedelta(minutes=25), "CATCH_UP", 3)
    assert [f.scheduled_for.strftime("%H:%M") for f in decision.fire] == ["01:10", "01:20", "01:30", "01:40", "01:50", "02:00"]
    assert decision.missed_count == 6  # 00:10 .. 01:00


def test_nothing_to_decide_when_now_is_not_after_cursor():
    spec = parse_spec("cron", "* * * * *")
    t = datetime(2026, 1, 1, tzinfo=UTC)
    decision = resolve_misfire(spec, t, t, timedelta(0), "SKIP", 0)
    assert (decision.fire, decision.missed, decision.missed_count, decision.cursor) == ([], [], 0, t)
