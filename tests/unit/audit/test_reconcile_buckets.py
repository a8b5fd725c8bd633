"""Cutting a reconcile range into time buckets (scheduler/audit/reconcile_buckets.py)."""
from __future__ import annotations

import pytest

from scheduler.audit.reconcile_buckets import plan_buckets


@pytest.mark.parametrize(("span", "estimated", "target"), [
    (1_000, 0, 10), (1_000, 5, 10), (1_000, 10_000, 10), (86_400_000, 200_000_000, 500_000), (7, 1e9, 1),
    (999_983, 1_234_567, 100_000),
])
def test_the_buckets_cover_the_range_once_in_order_and_each_instant_has_one(span, estimated, target):
    from_ms = 1_777_852_800_000
    buckets = plan_buckets(from_ms, from_ms + span, estimated, target)
    bounds = [buckets.bounds(n) for n in range(buckets.count)]
    assert bounds[0][0] == from_ms and bounds[-1][1] == from_ms + span
    assert all(end == start for (_, end), (start, _) in zip(bounds, bounds[1:], strict=False))
    assert all(start < end for start, end in bounds)
    for n, (start, end) in enumerate(bounds):
        assert buckets.index(start) == n and buckets.index(end - 1) == n


def test_as_many_buckets_as_the_estimate_asks_and_never_more_than_milliseconds():
    assert plan_buckets(0, 86_400_000, 200_000_000, 500_000).count == 400
    assert plan_buckets(0, 60_000, 30_000, 500_000).count == 1
    assert plan_buckets(0, 60_000, 1_000_001, 500_000).count == 3
    assert plan_buckets(0, 5, 10**9, 1).count == 5


def test_an_empty_range_or_target_is_refused():
    with pytest.raises(ValueError, match="empty range"):
        plan_buckets(5, 5, 1)
    with pytest.raises(ValueError, match="target_rows"):
        plan_buckets(0, 5, 1, 0)
