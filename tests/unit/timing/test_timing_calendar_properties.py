"""Property tests for the calendar kinds: RRULE (EXDATE, COUNT, UNTIL), cron W/LW and month_end=clamp
against brute-force local-day references, in DST-heavy zones over 2000-2037, every DST option."""
from __future__ import annotations

from datetime import date, datetime, time, timedelta
from zoneinfo import ZoneInfo

from calendar_reference import _fires, clamped_month_days, reference_cron_days, reference_rrule, rrule_walls
from dateutil.rrule import rrulestr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from timing_reference import UTC, transitions
from timing_strategies import ZONES, gaps, near_transition, overlaps

from scheduler.timing.errors import SpecError
from scheduler.timing.fires import count_fires, excluded_between, next_fires
from scheduler.timing.spec import parse_spec

SETTINGS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])

BY_PARTS = {
    "YEARLY": ["", ";BYMONTH=2;BYMONTHDAY=29", ";BYDAY=20MO", ";BYDAY=-1SU", ";BYMONTH=3,10;BYDAY=-1SU",
               ";BYMONTH=11;BYDAY=4TH", ";BYMONTH=1,4,7,10;BYMONTHDAY=1", ";BYMONTH=3,9;BYDAY=SA,SU;BYSETPOS=1,-1"],
    "MONTHLY": ["", ";BYDAY=2TU", ";BYDAY=-1FR", ";BYDAY=MO,TU,WE,TH,FR;BYSETPOS=-1", ";BYMONTHDAY=1,15",
                ";BYMONTHDAY=-1", ";BYMONTHDAY=31", ";BYMONTHDAY=13;BYDAY=FR", ";BYDAY=SA,SU;BYSETPOS=2,-2",
                ";BYMONTH=3,6,9,12;BYDAY=MO,TU,WE,TH,FR;BYSETPOS=-1", ";BYDAY=1SU,-1SU"],
    "WEEKLY": ["", ";BYDAY=MO", ";BYDAY=SA,SU", ";BYDAY=MO,WE,FR;WKST=SU", ";BYDAY=TU,TH;BYMONTH=3,4,10,11",
               ";BYDAY=MO,TU,WE,TH,FR;BYSETPOS=-1", ";BYDAY=SU,MO;WKST=SA"],
    "DAILY": ["", ";BYMONTH=3,10", ";BYDAY=MO,TU,WE,TH,FR", ";BYMONTHDAY=1,15,-1", ";BYDAY=SU;BYMONTH=3,4,9,10,11"],
}
HORIZON = {"YEARLY": timedelta(days=366 * 9), "MONTHLY": timedelta(days=400), "WEEKLY": timedelta(days=120),
           "DAILY": timedelta(days=12)}
TIMES = [time(0, 0), time(0, 30), time(1, 0), time(1, 30), time(2, 0), time(2, 30), time(3, 0), time(3, 30),
         time(12, 0), time(23, 30), time(4, 15, 45)]


def _time_near_transition(zone: str, after: datetime, shift: timedelta) -> time | None:
    """A wall time close to the zone's transition nearest `after` (in or around its gap or overlap)."""
    nearest = min(transitions(zone), key=lambda t: abs(t - after), default=None)
    if nearest is None:
        return None
    before = nearest - timedelta(seconds=1)
    wall = before.astimezone(ZoneInfo(zone)).replace(tzinfo=None) + timedelta(seconds=1) + shift
    return wall.time().replace(second=0)


@st.composite
def rrule_cases(draw):
    """(expression, dateutil rule line, naive DTSTART, zone, after, horizon, exdates)."""
    zone, after = draw(near_transition())
    freq = draw(st.sampled_from(["DAILY", *sorted(BY_PARTS)]))  # DAILY twice: it meets every transition
    interval = draw(st.integers(1, 2 if freq == "YEARLY" else 4))
    local_after = after.astimezone(UTC).replace(tzinfo=None)
    tod = draw(st.sampled_from(TIMES))
    if draw(st.integers(0, 3)):
        shift = timedelta(minutes=draw(st.sampled_from([-45, -30, -15, 0, 15, 30])))
        tod = _time_near_transition(zone, after, shift) or tod
        interval = 1 if freq == "DAILY" else interval  # so the transition day is a fire day
    dtstart = datetime.combine(local_after.date() - timedelta(days=draw(st.integers(0, 900))), tod)
    rule = f"FREQ={freq};INTERVAL={interval}{draw(st.sampled_from(BY_PARTS[freq]))}"
    end = draw(st.sampled_from(["", "count", "until"]))
    if end == "count":
        rule += f";COUNT={draw(st.integers(1, 40))}"
    elif end == "until":
        rule += f";UNTIL={(local_after + timedelta(days=draw(st.integers(-30, 200)))):%Y%m%dT%H%M%S}"
    walls, _ = rrule_walls(rule, dtstart, local_after - timedelta(days=2), local_after + HORIZON[freq])
    picks = draw(st.lists(st.integers(0, 50), max_size=3)) if walls else []
    exdates = frozenset(walls[i % len(walls)].date() for i in picks)
    exdates |= {local_after.date() + timedelta(days=draw(st.integers(-2, 60))) for _ in range(draw(st.integers(0, 1)))}
    text = f"DTSTART:{dtstart:%Y%m%dT%H%M%S} RRULE:{rule}"
    if exdates:
        text += " EXDATE:" + ",".join(f"{d:%Y%m%d}" for d in sorted(exdates))
    return text, rule, dtstart, zone, after, HORIZON[freq], exdates


def _window(after: datetime, horizon: timedelta, fires):
    return [(u, r) for u, r in fires if after < u < after + horizon]


@SETTINGS
@given(rrule_cases(), gaps, overlaps)
def test_rrule_fires_and_exdates_match_reference(case, gap, overlap):
    text, rule, dtstart, zone, after, horizon, exdates = case
    try:
        spec = parse_spec("rrule", text, zone, dst_gap=gap, dst_overlap=overlap)
    except SpecError:  # rejected as yielding no day at all: so says dateutil
        assert rrulestr(rule, dtstart=dtstart).after(dtstart, inc=True) is None
        return
    naive = after.replace(tzinfo=None)
    kept, excluded = reference_rrule(rule, dtstart, zone, gap, overlap, naive - timedelta(days=2),
                                     naive + horizon + timedelta(days=2), exdates)
    expected, expected_excluded = _window(after, horizon, kept), _window(after, horizon, excluded)
    got = [(f.scheduled_for, f.dst_rule) for f in next_fires(spec, after, len(expected) + 1)]
    assert got[: len(expected)] == expected
    if len(got) == len(expected):  # the rule ended (COUNT / UNTIL): dateutil has nothing later either
        later, _ = rrule_walls(rule, dtstart, naive + horizon - timedelta(days=2), datetime(9999, 1, 1))
        assert all(u < after + horizon for u, _ in _fires(later, zone, gap, overlap))
    else:
        assert got[-1][0] >= after + horizon
    until = after + horizon - timedelta(microseconds=1)
    assert count_fires(spec, after, until) == len(expected)
    assert [(f.scheduled_for, f.dst_rule) for f in excluded_between(spec, after, until)] == expected_excluded


CRON_DOMS = ["15W", "1W", "31W", "30W", "2W", "LW", "31", "30,31", "29", "L"]
CRON_TIMES = [("0", "0", [time(0, 0)]), ("30", "2", [time(2, 30)]), ("0", "1", [time(1, 0)]),
              ("30", "0", [time(0, 30)]), ("59", "23", [time(23, 59)]), ("0,30", "2", [time(2, 0), time(2, 30)]),
              ("0", "3", [time(3, 0)])]


@SETTINGS
@given(st.sampled_from(CRON_DOMS), st.sampled_from(CRON_TIMES), st.booleans(), near_transition(), gaps, overlaps)
def test_cron_w_lw_and_clamp_match_reference(dom, times, clamp, zone_after, gap, overlap):
    zone, after = zone_after
    minute, hour, walls = times
    spec = parse_spec("cron", f"{minute} {hour} {dom} * *", zone, dst_gap=gap, dst_overlap=overlap,
                      month_end="clamp" if clamp else "skip")
    horizon = timedelta(days=70)
    day = after.replace(tzinfo=None).date()
    fires = reference_cron_days(dom, walls, clamp, zone, gap, overlap, day - timedelta(days=2),
                                day + horizon + timedelta(days=2))
    expected = _window(after, horizon, fires)
    got = [(f.scheduled_for, f.dst_rule) for f in next_fires(spec, after, len(expected) + 1)]
    assert got[: len(expected)] == expected
    assert len(got) == len(expected) + 1 and got[-1][0] >= after + horizon


@SETTINGS
@given(st.sampled_from(["29", "30", "31", "-29", "-30", "-31", "31,15", "30,-31"]), st.sampled_from(TIMES),
       st.sampled_from(ZONES), st.integers(2000, 2036), st.integers(1, 12), gaps, overlaps)
def test_rrule_month_end_clamp_matches_reference(month_days, tod, zone, year, month, gap, overlap):
    dtstart = datetime.combine(date(year, month, 1), tod)
    text = f"DTSTART:{dtstart:%Y%m%dT%H%M%S} RRULE:FREQ=MONTHLY;BYMONTHDAY={month_days}"
    spec = parse_spec("rrule", text, zone, dst_gap=gap, dst_overlap=overlap, month_end="clamp")
    last = date(year + 1, month, 1)
    days = clamped_month_days([int(v) for v in month_days.split(",")], dtstart.date(), last)
    expected = [(u, r) for u, r in _fires([datetime.combine(d, tod) for d in days], zone, gap, overlap)
                if u.replace(tzinfo=None) < datetime.combine(last, time(0)) - timedelta(days=2)]
    after = datetime(year, month, 1, tzinfo=UTC) - timedelta(days=2)
    got = [(f.scheduled_for, f.dst_rule) for f in next_fires(spec, after, len(expected))]
    assert got == expected


@st.composite
def transition_day_rules(draw):
    """A DAILY or WEEKLY rule whose wall time sits in or beside a drawn transition's gap or overlap."""
    zone = draw(st.sampled_from(ZONES))
    found = transitions(zone)
    if not found:
        return None
    moment = draw(st.sampled_from(found))
    wall = (moment - timedelta(seconds=1)).astimezone(ZoneInfo(zone)).replace(tzinfo=None) + timedelta(seconds=1)
    wall += timedelta(minutes=draw(st.sampled_from([-45, -30, -15, 0, 15, 30, 45])))
    day = wall.date()
    by = draw(st.sampled_from(["FREQ=DAILY", f"FREQ=WEEKLY;BYDAY={('MO', 'TU', 'WE', 'TH', 'FR', 'SA', 'SU')[day.weekday()]}"]))
    dtstart = datetime.combine(day - timedelta(days=draw(st.integers(0, 20))), wall.time().replace(second=0))
    return by, dtstart, zone, moment


@SETTINGS
@given(transition_day_rules(), gaps, overlaps)
def test_rrule_on_transition_days_matches_reference(case, gap, overlap):
    if case is None:
        return
    rule, dtstart, zone, moment = case
    spec = parse_spec("rrule", f"DTSTART:{dtstart:%Y%m%dT%H%M%S} RRULE:{rule}", zone, dst_gap=gap, dst_overlap=overlap)
    after = moment - timedelta(days=3)
    naive = after.replace(tzinfo=None)
    horizon = timedelta(days=20)
    kept, _ = reference_rrule(rule, dtstart, zone, gap, overlap, naive - timedelta(days=2), naive + horizon + timedelta(days=2))
    expected = _window(after, horizon, kept)
    assert [(f.scheduled_for, f.dst_rule) for f in next_fires(spec, after, len(expected))] == expected
