"""Standby placement: every partition gets `replicas` copies on members other than its owner."""
from __future__ import annotations

from collections import Counter

import pytest

from scheduler.engine.standby_placement import standby_partitions


def test_two_members_keep_each_other_warm() -> None:
    owners = {"m-b": {4, 5, 6, 7}, "m-a": {0, 1, 2, 3}}
    assert standby_partitions(owners, "m-a", 1) == {4, 5, 6, 7}
    assert standby_partitions(owners, "m-b", 1) == {0, 1, 2, 3}


def test_a_lone_member_or_no_replicas_keeps_nothing() -> None:
    assert standby_partitions({"m-a": set(range(8))}, "m-a", 1) == set()
    assert standby_partitions({"m-a": {0}, "m-b": {1}}, "m-a", 0) == set()


def test_a_member_not_in_the_group_yet_keeps_nothing() -> None:
    assert standby_partitions({"m-a": {0, 1}}, "m-new", 1) == set()


@pytest.mark.parametrize("members", [2, 3, 4, 5])
@pytest.mark.parametrize("replicas", [1, 2, 3])
def test_each_partition_has_min_replicas_copies_never_on_its_owner(members: int, replicas: int) -> None:
    names = [f"m-{n}" for n in range(members)]
    owners = {name: {p for p in range(12) if p % members == n} for n, name in enumerate(names)}
    copies: Counter[int] = Counter()
    for name in names:
        kept = standby_partitions(owners, name, replicas)
        assert not kept & owners[name]
        copies.update(kept)
    assert copies == Counter({p: min(replicas, members - 1) for p in range(12)})
