"""Which partitions a process keeps warm: a pure function of the group's current assignment.

Kafka Streams places `num.standby.replicas` copies of each task on other members; here each member's
partitions are copied by the `replicas` members that follow it in member-id order (round-robin), so
every process computes the same placement from the same group description and no one coordinates it.
With two processes and one replica, each keeps warm exactly the partitions the other owns: the ones
it receives when the other dies.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping


def standby_partitions(owners: Mapping[str, Iterable[int]], me: str, replicas: int) -> set[int]:
    """The partitions `me` should keep warm, given each member's owned partitions (`me` among them)."""
    members = sorted(owners)
    if replicas <= 0 or me not in owners:
        return set()
    mine = members.index(me)
    chosen: set[int] = set()
    for index, member in enumerate(members):
        if 1 <= (mine - index) % len(members) <= replicas:
            chosen.update(owners[member])
    return chosen - set(owners[me])
