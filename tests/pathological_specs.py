"""Specs that never fire under their own DST options, as wire ScheduleSpec records, and a hypothesis
strategy of specs on spring-forward days (some firing, some never): the search horizon's cases
(scheduler/timing/horizon.py) shared by the client, engine, HTTP and broker tests."""
from __future__ import annotations

from datetime import date, datetime, timezone
from zoneinfo import ZoneInfo

from hypothesis import strategies as st

from scheduler.control.specs import make_spec


def dublin_gap_spec(kind: str, minute: int) -> dict:
    """A spec at 01:MM on the last Sunday of March in Dublin, inside the spring-forward gap (01:00 to
    02:00) every year, with the default dst_gap=SKIP: it never fires. One distinct spec per minute, so
    a test sending many is answered by no cache."""
    expressions = {
        "cron": f"{minute} 1 * 3 0L",
        "rrule": f"DTSTART:20260329T01{minute:02}00 RRULE:FREQ=YEARLY;BYMONTH=3;BYDAY=-1SU",
        "once": f"2027-03-28T01:{minute:02}:00",
    }
    return make_spec(kind, expressions[kind], "Europe/Dublin")


NEVER_FIRING = {kind: dublin_gap_spec(kind, 30) for kind in ("cron", "rrule", "once")}

# (zone, cron day-of-month month day-of-week, RRULE BY parts, DTSTART date) of each zone's spring-forward day.
_SPRING_FORWARD = [
    ("Europe/Dublin", "* 3 0L", "BYMONTH=3;BYDAY=-1SU", "20260329"),
    ("Europe/Berlin", "* 3 0L", "BYMONTH=3;BYDAY=-1SU", "20260329"),
    ("America/New_York", "* 3 0#2", "BYMONTH=3;BYDAY=2SU", "20260308"),
    ("America/Havana", "* 3 0#2", "BYMONTH=3;BYDAY=2SU", "20260308"),
    ("Australia/Lord_Howe", "* 10 0#1", "BYMONTH=10;BYDAY=1SU", "20261004"),
]


@st.composite
def spring_forward_specs(draw: st.DrawFn) -> dict:
    """A cron, RRULE or local one-shot at a wall time between 00:00 and 03:59 of a zone's spring-forward
    day, skipped or shifted in the gap: the ones inside the gap with SKIP never fire."""
    zone, days, by_parts, dtstart = draw(st.sampled_from(_SPRING_FORWARD))
    hour, minute = draw(st.integers(0, 3)), draw(st.integers(0, 59))
    gap = draw(st.sampled_from(["SKIP", "SHIFT"]))
    kind = draw(st.sampled_from(["cron", "rrule", "once"]))
    if kind == "cron":
        expression = f"{minute} {hour} {days}"
    elif kind == "rrule":
        expression = f"DTSTART:{dtstart}T{hour:02}{minute:02}00 RRULE:FREQ=YEARLY;{by_parts}"
    else:
        expression = f"{dtstart[:4]}-{dtstart[4:6]}-{dtstart[6:]}T{hour:02}:{minute:02}:00"
    return make_spec(kind, expression, zone, dst_gap=gap)


# The instant the unit tests validate at, and each zone's first spring-forward day after it (the
# zones' rules repeat every year from then on).
NOW_MS = 1_796_342_400_000  # 2026-12-04T00:00:00Z
_NEXT_GAP_DAY = {"Europe/Dublin": date(2027, 3, 28), "Europe/Berlin": date(2027, 3, 28),
                 "America/New_York": date(2027, 3, 14), "America/Havana": date(2027, 3, 14),
                 "Australia/Lord_Howe": date(2027, 10, 3)}


def _wall_time_exists(zone: str, day: date, hour: int, minute: int) -> bool:
    local = datetime(day.year, day.month, day.day, hour, minute, tzinfo=ZoneInfo(zone))
    back = local.astimezone(timezone.utc).astimezone(ZoneInfo(zone))
    return back.replace(tzinfo=None) == local.replace(tzinfo=None)


def never_fires(spec: dict) -> bool:
    """For a spring_forward_specs() spec, by zoneinfo and not the time core: a SKIP spec whose wall time
    lies in its zone's gap (from NOW_MS on, or on its one-shot's date) never fires."""
    expression, zone = spec["expression"], spec["time_zone"]
    if spec["dst_gap"] != "SKIP":
        return False
    if spec["kind"] == "ONCE":
        wall = datetime.fromisoformat(expression)
        return not _wall_time_exists(zone, wall.date(), wall.hour, wall.minute)
    if spec["kind"] == "CRON":
        minute, hour = (int(v) for v in expression.split()[:2])
    else:  # DTSTART:YYYYMMDDTHHMMSS
        hour, minute = int(expression[17:19]), int(expression[19:21])
    return not _wall_time_exists(zone, _NEXT_GAP_DAY[zone], hour, minute)
