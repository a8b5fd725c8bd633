"""Spec validation (every error names its field), windows, max_fires and one-shots."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from scheduler.timing.fires import count_fires, next_fire, next_fires
from scheduler.timing.spec import SpecError, parse_spec

UTC = timezone.utc
T0 = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"kind": "weekly", "expression": "x"}, "kind"),
        ({"kind": "cron", "expression": "61 * * * *"}, "expression"),
        ({"kind": "cron", "expression": "0 0 30 2 *"}, "expression"),
        ({"kind": "cron", "expression": "0 0 * * * *"}, "expression"),
        ({"kind": "cron", "expression": "@reboot"}, "expression"),
        ({"kind": "cron", "expression": "0 0 * * MON#6"}, "expression"),
        ({"kind": "cron", "expression": "0 0 * * *", "time_zone": "Mars/Base"}, "time_zone"),
        ({"kind": "cron", "expression": "0 0 * * *", "time_zone": "EST5EDT-nope"}, "time_zone"),
        ({"kind": "cron", "expression": "0 0 * * *", "dst_gap": "later"}, "dst_gap"),
        ({"kind": "cron", "expression": "0 0 * * *", "dst_overlap": "twice"}, "dst_overlap"),
        ({"kind": "cron", "expression": "0 0 * * *", "start_at": datetime(2026, 1, 1)}, "start_at"),
        ({"kind": "cron", "expression": "0 0 * * *", "start_at": T0, "end_at": T0 - timedelta(1)}, "end_at"),
        ({"kind": "cron", "expression": "0 0 * * *", "max_fires": 0}, "max_fires"),
        ({"kind": "cron", "expression": "0 0 * * *", "anchor_at": T0}, "anchor_at"),
        ({"kind": "rate", "expression": "every 90m"}, "anchor_at"),
        ({"kind": "rate", "expression": "every 0s", "anchor_at": T0}, "expression"),
        ({"kind": "rate", "expression": "90 minutes", "anchor_at": T0}, "expression"),
        ({"kind": "once", "expression": "tomorrow"}, "expression"),
    ],
)
def test_invalid_specs_name_the_field(kwargs, field):
    kind, expression = kwargs.pop("kind"), kwargs.pop("expression")
    with pytest.raises(SpecError) as caught:
        parse_spec(kind, expression, **kwargs)
    assert caught.value.field == field
    assert isinstance(caught.value, ValueError)


def test_expression_and_zone_are_stored_as_given():
    spec = parse_spec("cron", "0 9 * * mon-fri", "Asia/Tokyo", start_at=datetime(2026, 1, 1, 9, tzinfo=timezone(timedelta(hours=9))))
    assert (spec.expression, spec.time_zone) == ("0 9 * * mon-fri", "Asia/Tokyo")
    assert spec.start_at == T0 and spec.start_at.tzinfo == UTC


def test_start_and_end_are_inclusive_and_max_fires_counts_prior_fires():
    spec = parse_spec("cron", "0 * * * *", start_at=T0, end_at=T0 + timedelta(hours=5), max_fires=4)
    assert [f.scheduled_for for f in next_fires(spec, T0 - timedelta(days=3), 10)] == [
        T0 + timedelta(hours=h) for h in range(4)
    ]
    assert len(next_fires(spec, T0 - timedelta(days=3), 10, fired_before=3)) == 1
    assert next_fire(spec, T0 - timedelta(days=3), fired_before=4) is None
    unlimited = parse_spec("cron", "0 * * * *", start_at=T0, end_at=T0 + timedelta(hours=5))
    assert len(next_fires(unlimited, T0 - timedelta(days=3), 10)) == 6
    assert count_fires(unlimited, T0 - timedelta(days=3), T0 + timedelta(days=3)) == 6


def test_rate_anchor_defaults_to_start_and_is_a_fire():
    spec = parse_spec("rate", "every 1h30m", start_at=T0)
    assert spec.anchor_at == T0
    assert [f.scheduled_for for f in next_fires(spec, T0 - timedelta(seconds=1), 3)] == [
        T0, T0 + timedelta(minutes=90), T0 + timedelta(minutes=180)
    ]


def test_once_instant_and_local_time():
    assert [f.scheduled_for for f in next_fires(parse_spec("once", "2026-05-01T10:00:00+02:00"), T0, 5)] == [
        datetime(2026, 5, 1, 8, tzinfo=UTC)
    ]
    local = parse_spec("once", "2026-05-01T10:00:00", "Europe/Paris")
    assert next_fires(local, T0, 5)[0].scheduled_for == datetime(2026, 5, 1, 8, tzinfo=UTC)
    assert next_fires(local, datetime(2026, 5, 1, 8, tzinfo=UTC), 5) == []


def test_once_local_time_follows_the_dst_contract():
    gap = "2026-03-08T02:30:00"
    assert next_fires(parse_spec("once", gap, "America/New_York"), T0, 5) == []
    shifted = next_fires(parse_spec("once", gap, "America/New_York", dst_gap="shift"), T0, 5)
    assert [(f.scheduled_for, f.dst_rule) for f in shifted] == [(datetime(2026, 3, 8, 7, tzinfo=UTC), "gap_shifted")]
    both = next_fires(parse_spec("once", "2026-11-01T01:30:00", "America/New_York", dst_overlap="both"), T0, 5)
    assert [f.scheduled_for.hour for f in both] == [5, 6]


def test_naive_after_is_rejected():
    with pytest.raises(ValueError):
        next_fires(parse_spec("cron", "* * * * *"), datetime(2026, 1, 1), 1)
