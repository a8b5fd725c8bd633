"""Which occurrence partitions a stage writes, and where ordinary occurrences go while it is open (ADR 0002).

A `read_committed` reader cannot pass an open transaction's first record in a partition, so a stage that
wrote to every partition of a tenant's topic would hold back every ordinary occurrence sent there during
its produce window and until its commit: the bystanders of the burst. So a stage writes each topic's burst
to a subset of the partitions its process alone writes, sized to the burst (a small tenant's few hundred
occurrences need one partition, not eight), and while it is open the process sends that topic's ordinary
occurrences to the partitions the stage left free. An occurrence's partition carries no meaning for its
workers (they follow the topic; occurrence ids, not partitions, identify duplicates), so moving one costs
only its order relative to the schedule's other occurrences, which no consumer relies on.

The partitions a process alone writes: occurrence partition q takes the schedules of schedule partition
q mod S (murmur2 of the schedule id, S schedule partitions) when S divides the topic's partition count. A
process owning a single schedule partition of an eight-partition topic has no partition to spare: its
stage writes that partition and its ordinary occurrences wait for the commit, as before.

Pure: the stager chooses layouts when its produce window opens; the turns reroute through them.
"""
from __future__ import annotations

import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field

PER_PARTITION = 10_000  # a topic's staged occurrences per partition before its stage spreads over one more


@dataclass(frozen=True)
class TopicLayout:
    partitions: int  # the topic's partition count
    staged: tuple[int, ...]  # where the stage writes the topic's burst
    free: tuple[int, ...]  # the process's other partitions of the topic: its ordinary occurrences meanwhile
    _staged_set: frozenset[int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_staged_set", frozenset(self.staged))

    def reroute(self, partition: int) -> int:
        """Where an ordinary occurrence bound for `partition` goes while the stage is open."""
        if partition not in self._staged_set or not self.free:
            return partition
        return self.free[partition % len(self.free)]

    def split(self, values: list[bytes], keys: list[bytes]) -> list[tuple[int, list[bytes], list[bytes]]]:
        """The topic's staged records in near-equal runs over its staged partitions: (partition, values, keys)."""
        n, k = len(values), len(self.staged)
        bounds = [n * i // k for i in range(k + 1)]
        return [(partition, values[a:b], keys[a:b])
                for partition, a, b in zip(self.staged, bounds, bounds[1:], strict=False) if b > a]


def writable(topic_partitions: int, schedule_partitions: int, owned: Iterable[int]) -> tuple[int, ...] | None:
    """The partitions of an occurrence topic that only the owner of schedule partitions `owned` writes, or
    None when the counts do not line up (then every process may write any of them)."""
    if topic_partitions % schedule_partitions:
        return None
    mine = set(owned)
    return tuple(q for q in range(topic_partitions) if q % schedule_partitions in mine)


def plan(topic: str, count: int, mine: tuple[int, ...], topic_partitions: int,
         per_partition: int = PER_PARTITION) -> TopicLayout:
    """The layout of one topic's part of a stage of `count` occurrences over the process's partitions `mine`:
    one partition per `per_partition` occurrences, leaving at least one free when there are two or more.
    Topics start at different partitions (a hash of the name), so small tenants' stages do not all land on
    one partition number."""
    spare = len(mine) - 1 if len(mine) > 1 else 1
    k = min(spare, max(1, -(-count // per_partition)))
    start = zlib.crc32(topic.encode()) % len(mine)
    ring = mine[start:] + mine[:start]
    return TopicLayout(topic_partitions, ring[:k], ring[k:])
