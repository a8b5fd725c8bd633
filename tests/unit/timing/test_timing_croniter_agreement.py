"""Away from DST (UTC) our cron semantics agree with croniter's for the shared grammar.

Excluded: a restricted day-of-month together with `#`/`L` in day-of-week. We apply
Vixie's OR there as for any two restricted day fields; croniter 5.x ANDs them
(`0 0 L * TUE#5`) or gives up (`0 0 1 * FRI#2` raises "failed to find next date").
Where croniter gives up otherwise, our fires are checked against the reference matcher.
"""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from croniter import CroniterBadDateError, croniter
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from timing_reference import cron_matches

from scheduler.timing.fires import next_fires
from scheduler.timing.spec import SpecError, parse_spec

UTC = timezone.utc


@settings(max_examples=150, deadline=None)
@given(
    st.sampled_from(["*", "*/5", "0", "15,45", "10-20/5", "59"]),
    st.sampled_from(["*", "0", "9-17", "*/6", "23"]),
    st.sampled_from(["*", "1", "L", "15", "1-7", "29", "31"]),
    st.sampled_from(["*", "JAN", "2-11/3", "FEB", "feb,aug"]),
    st.sampled_from(["*", "MON-FRI", "SUN", "FRI#2", "L5", "0,6", "7", "TUE#5"]),
    st.integers(0, 30 * 365 * 24).map(lambda h: datetime(2000, 1, 1, tzinfo=UTC) + timedelta(hours=h, minutes=h % 60)),
)
def test_next_fires_agree_with_croniter_in_utc(minute, hour, dom, month, dow, start):
    assume(dom == "*" or not any(mark in dow for mark in "#L"))
    expression = f"{minute} {hour} {dom} {month} {dow}"
    iterator = croniter(expression, start)
    try:
        spec = parse_spec("cron", expression)
    except SpecError as error:  # we reject expressions that never match; croniter finds no date
        assert error.field == "expression" and "never matches" in error.message
        with pytest.raises(CroniterBadDateError):
            iterator.get_next(datetime)
        return
    ours = [f.scheduled_for for f in next_fires(spec, start, 8)]
    try:
        theirs = [iterator.get_next(datetime) for _ in range(8)]
    except CroniterBadDateError:  # croniter gives up on e.g. `* * 31 FEB MON-FRI` (Vixie: Feb weekdays)
        assert ours and all(cron_matches(expression, u.replace(tzinfo=None)) for u in ours)
        return
    assert ours == theirs
