"""Where a stage writes its burst and where ordinary occurrences go meanwhile (scheduler/engine/stage_layout.py)."""
from __future__ import annotations

import pytest

from scheduler.engine.stage_layout import PER_PARTITION, TopicLayout, plan, writable


def test_only_the_partitions_of_owned_schedule_partitions_are_writable():
    assert writable(8, 8, {1, 5}) == (1, 5)
    assert writable(16, 8, [3]) == (3, 11), "q takes the schedules of schedule partition q mod 8"
    assert writable(12, 8, [0]) is None, "8 does not divide 12: any process may write any partition"


@pytest.mark.parametrize("count, staged", [(1, 1), (PER_PARTITION, 1), (PER_PARTITION + 1, 2),
                                           (3 * PER_PARTITION, 3), (100 * PER_PARTITION, 7)])
def test_a_burst_takes_a_partition_per_share_and_always_leaves_one_free(count, staged):
    layout = plan("sched.occurrences.big.high", count, tuple(range(8)), 8)
    assert len(layout.staged) == staged and len(layout.free) == 8 - staged
    assert sorted(layout.staged + layout.free) == list(range(8))


def test_a_single_owned_partition_is_staged_and_nothing_is_free():
    layout = plan("t", 50, (4,), 8)
    assert layout.staged == (4,) and layout.free == ()
    assert layout.reroute(4) == 4, "nowhere else to go: the ordinary occurrence waits for the commit, as before"


def test_small_tenants_start_on_different_partitions():
    firsts = {plan(f"sched.occurrences.t{n}.high", 10, tuple(range(8)), 8).staged[0] for n in range(100)}
    assert len(firsts) == 8


def test_ordinary_occurrences_avoid_the_staged_partitions_and_keep_the_others():
    layout = plan("t", 3 * PER_PARTITION, (0, 2, 4, 6, 8, 10), 12)
    for partition in range(12):
        moved = layout.reroute(partition)
        assert moved not in layout.staged
        if partition not in layout.staged:
            assert moved == partition


@pytest.mark.parametrize("n", [0, 1, 2, 7, 100])
def test_a_split_keeps_every_record_once_in_order_and_near_equal(n):
    layout = TopicLayout(8, (5, 6, 7), (0, 1, 2, 3, 4))
    values = [str(i).encode() for i in range(n)]
    keys = [b"k" + v for v in values]
    runs = layout.split(values, keys)
    assert [v for _, vs, _ in runs for v in vs] == values and [k for _, _, ks in runs for k in ks] == keys
    assert all(partition in layout.staged for partition, _, _ in runs)
    sizes = [len(vs) for _, vs, _ in runs]
    assert not sizes or max(sizes) - min(sizes) <= 1
