"""Property tests: next_fires / count_fires against the minute-walking reference, across
DST-heavy zones, years 2000-2037 and every gap/overlap option."""
from __future__ import annotations

from datetime import datetime, timedelta

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from timing_reference import UTC, reference_cron, transitions
from timing_strategies import gaps, near_transition, overlaps

from scheduler.timing.fires import count_fires, next_fires, nth_fire
from scheduler.timing.spec import parse_spec

HORIZON = timedelta(days=2)
PROPERTY_SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])

minute_fields = st.sampled_from(["0", "30", "*/15", "0,30", "*/7", "45", "59", "1-3", "*"])
hour_fields = st.sampled_from(["*", "0", "1", "2", "3", "0-3", "1,2", "23", "*/2", "0,12", "22-23"])
day_fields = st.sampled_from([("*", "*"), ("*", "*"), ("*", "*"), ("L", "*"), ("*", "SUN"), ("1-15", "5L"), ("*", "SUN#1,SAT#2"), ("*/2", "MON-FRI"), ("13", "FRI")])


@st.composite
def cron_texts(draw) -> str:
    dom, dow = draw(day_fields)
    return f"{draw(minute_fields)} {draw(hour_fields)} {dom} * {dow}"


def _reference(expression, zone, gap, overlap, after):
    naive = after.replace(tzinfo=None)
    fires = reference_cron(expression, zone, gap, overlap, naive - timedelta(hours=40), naive + HORIZON + timedelta(hours=40))
    return [(u, rule) for u, rule in fires if after < u < after + HORIZON]


@PROPERTY_SETTINGS
@given(cron_texts(), near_transition(), gaps, overlaps)
def test_next_fires_match_reference(expression, zone_after, gap, overlap):
    zone, after = zone_after
    spec = parse_spec("cron", expression, zone, dst_gap=gap, dst_overlap=overlap)
    expected = _reference(expression, zone, gap, overlap, after)
    got = [(f.scheduled_for, f.dst_rule) for f in next_fires(spec, after, len(expected) + 1)]
    assert got[: len(expected)] == expected
    assert len(got) == len(expected) + 1 and got[-1][0] >= after + HORIZON


@settings(max_examples=60, deadline=None)
@given(cron_texts(), near_transition(), gaps, overlaps, st.integers(0, 47 * 3600))
def test_count_and_nth_match_reference(expression, zone_after, gap, overlap, span_seconds):
    zone, after = zone_after
    spec = parse_spec("cron", expression, zone, dst_gap=gap, dst_overlap=overlap)
    until = after + timedelta(seconds=span_seconds)
    expected = [u for u, _ in _reference(expression, zone, gap, overlap, after) if u <= until]
    assert count_fires(spec, after, until) == len(expected)
    for n, instant in enumerate(expected, start=1):
        assert nth_fire(spec, after, n).scheduled_for == instant


def test_apia_2011_is_covered():
    assert any(t.year == 2011 and t.month == 12 for t in transitions("Pacific/Apia"))


@settings(max_examples=80, deadline=None)
@given(
    st.integers(1, 3 * 86400),
    st.integers(-10**6, 10**6),
    st.integers(-10 * 86400, 10 * 86400),
    st.integers(1, 6),
)
def test_rate_matches_arithmetic(period_s, anchor_offset_s, after_offset_s, count):
    anchor = datetime(2021, 3, 14, 6, 59, tzinfo=UTC) + timedelta(seconds=anchor_offset_s)
    after = anchor + timedelta(seconds=after_offset_s)
    spec = parse_spec("rate", f"every {period_s}s", "America/New_York", anchor_at=anchor)
    expected, k = [], 0
    while len(expected) < count:
        t = anchor + k * timedelta(seconds=period_s)
        if t > after:
            expected.append(t)
        k += 1
    assert [f.scheduled_for for f in next_fires(spec, after, count)] == expected
    until = after + timedelta(seconds=period_s * count)
    last_index = max(0, (after_offset_s + period_s * count) // period_s + 2)
    brute = sum(1 for j in range(last_index + 1) if after < anchor + j * timedelta(seconds=period_s) <= until)
    assert count_fires(spec, after, until) == brute
