from scheduler.control.client import make_spec
from scheduler.engine.materialize import plan
from scheduler.timing.instants import to_datetime
from scheduler.timing.occurrence_id import occurrence_id
from scheduler.timing.spec_record import compile_spec

NOW = 1_800_000_000_000  # 2027-01-15T08:00:00Z, a multiple of 5 minutes
MIN = 60_000


def planned(spec_record, cursor_ms, now_ms=NOW, horizon_ms=10 * MIN, fired=0):
    return plan(compile_spec(spec_record), spec_record, "s1", 4, cursor_ms, fired, now_ms, horizon_ms)


def test_only_fires_within_the_horizon_are_materialized_and_the_cursor_points_past_them():
    result = planned(make_spec("cron", "*/5 * * * *"), NOW)
    assert [o.scheduled_for_ms for o in result.occurrences] == [NOW + 5 * MIN, NOW + 10 * MIN]
    assert result.next_fire_ms == NOW + 15 * MIN
    assert result.fired_count == 2
    first = result.occurrences[0]
    assert first.occurrence_id == occurrence_id("s1", 4, to_datetime(NOW + 5 * MIN))
    assert first.available_at_ms == first.scheduled_for_ms and not first.catch_up


def test_flexible_schedules_are_available_within_their_window_deterministically():
    spec = make_spec("cron", "*/5 * * * *", flexible_window_ms=5 * MIN)
    a = planned(spec, NOW).occurrences
    b = planned(spec, NOW).occurrences
    assert a == b
    assert all(o.scheduled_for_ms <= o.available_at_ms < o.scheduled_for_ms + 5 * MIN for o in a)
    assert len({o.available_at_ms - o.scheduled_for_ms for o in a}) == len(a)


def test_an_exhausted_one_shot_has_no_next_fire():
    result = planned(make_spec("once", "2027-01-15T08:03:00Z"), NOW)
    assert [o.scheduled_for_ms for o in result.occurrences] == [NOW + 3 * MIN]
    assert result.next_fire_ms is None


def test_downtime_with_skip_fires_only_what_is_within_max_lateness():
    spec = make_spec("cron", "* * * * *", misfire_policy="SKIP", max_lateness_ms=90_000)
    result = planned(spec, NOW - 60 * MIN, horizon_ms=0)
    assert [o.scheduled_for_ms for o in result.occurrences] == [NOW - MIN, NOW]
    assert not any(o.catch_up for o in result.occurrences)
    assert result.misfire.missed_count == 58


def test_downtime_with_fire_once_releases_the_latest_late_fire_on_the_catch_up_lane():
    spec = make_spec("cron", "* * * * *", misfire_policy="FIRE_ONCE", max_lateness_ms=30_000)
    result = planned(spec, NOW - 60 * MIN, horizon_ms=0)
    assert [(o.scheduled_for_ms, o.catch_up) for o in result.occurrences] == [(NOW - MIN, True), (NOW, False)]
    assert result.misfire.missed_count == 58


def test_downtime_with_catch_up_releases_at_most_k():
    spec = make_spec("cron", "* * * * *", misfire_policy="CATCH_UP", catch_up_limit=3, max_lateness_ms=0)
    result = planned(spec, NOW - 60 * MIN - 1, horizon_ms=0)
    late = [o for o in result.occurrences if o.catch_up]
    assert [o.scheduled_for_ms for o in late] == [NOW - 3 * MIN, NOW - 2 * MIN, NOW - MIN]
    assert [o.scheduled_for_ms for o in result.occurrences if not o.catch_up] == [NOW]
    assert result.misfire.missed_count == 57  # 61 candidates: 1 on time, 3 caught up


def test_a_year_of_missed_minutes_is_decided_without_enumerating_them():
    spec = make_spec("cron", "* * * * *", misfire_policy="SKIP", max_lateness_ms=0)
    result = planned(spec, NOW - 365 * 24 * 60 * MIN, horizon_ms=0)
    assert result.misfire.missed_count == 365 * 24 * 60 - 1
    assert len(result.misfire.missed) <= 1000


def test_exdated_fires_are_listed_once_for_recording_and_never_planned():
    # NOW is 2027-01-15T08:00Z; a daily 08:30 UTC rule with the 16th and 18th excluded.
    spec = make_spec("rrule", "DTSTART:20270110T083000 RRULE:FREQ=DAILY EXDATE:20270116,20270118")
    day = 24 * 60 * MIN
    fire = NOW + 30 * MIN
    first = planned(spec, NOW, horizon_ms=2 * day + 60 * MIN)
    assert [o.scheduled_for_ms for o in first.occurrences] == [fire, fire + 2 * day]
    assert first.next_fire_ms == fire + 4 * day
    # Everything up to the next pass's start is decided now, the 18th included.
    assert [(e.scheduled_for_ms, e.occurrence_id) for e in first.excluded] == [
        (fire + day, occurrence_id("s1", 4, to_datetime(fire + day))),
        (fire + 3 * day, occurrence_id("s1", 4, to_datetime(fire + 3 * day)))]
    later = planned(spec, first.next_fire_ms - 1, now_ms=NOW + 4 * day, horizon_ms=2 * day, fired=2)
    assert later.occurrences and later.excluded == []


def test_exdates_in_a_downtime_are_recorded_with_the_missed_fires():
    spec = make_spec("rrule", "DTSTART:20270110T083000 RRULE:FREQ=DAILY EXDATE:20270112",
                     misfire_policy="SKIP")
    result = planned(spec, NOW - 5 * 24 * 60 * MIN)
    assert result.misfire.missed_count == 4  # the 10th (08:30, after the cursor), 11th, 13th, 14th
    assert [to_datetime(e.scheduled_for_ms).day for e in result.excluded] == [12]


def test_a_replan_over_a_recorded_span_lists_only_the_exdates_beyond_it():
    spec = make_spec("rrule", "DTSTART:20270110T083000 RRULE:FREQ=DAILY EXDATE:20270116,20270118")
    day = 24 * 60 * MIN
    first = planned(spec, NOW, horizon_ms=2 * day + 60 * MIN)
    assert len(first.excluded) == 2
    again = plan(compile_spec(spec), spec, "s1", 4, NOW, 0, NOW + day, 2 * day + 60 * MIN,
                 recorded_until_ms=first.next_fire_ms - 1)
    assert again.excluded == [] and [o.scheduled_for_ms for o in again.occurrences][:1] == [NOW + 30 * MIN]
