"""Staged bursts: a large set of strict occurrences due at one instant is sent ahead of it, invisibly.

At the top of the hour the per-occurrence work (read the entry, produce the
occurrence and its timeline tombstone, commit) for hundreds of thousands of
occurrences takes longer than the 5 s SLO on small hardware. So in the seconds
before the instant the runtime produces them in a transaction of a second
producer and commits it when the instant comes: `read_committed` workers see
nothing before the commit and everything right after it. The staged records
are durable before their instant; the commit at the instant only writes the
transaction markers.

The price: while a stage is open, a `read_committed` reader of a partition it
has written cannot read past its first record there (the last stable offset),
so other occurrences sent to those partitions in the meantime become visible
at the commit as well. Staging therefore starts as late as the measured
staging rate allows, and only for a burst larger than ordinary dispatch sends
within a turn or two.

What is not staged takes the ordinary path at the instant: tenants with a
running-slot quota, schedules with an overlap policy (both are decided at
dispatch), occurrences beyond a tenant's trigger-rate tokens, and whatever a
stage did not reach in time. A stage that cannot commit is aborted and its
occurrences, still in the timeline, go the ordinary way: staging never loses
one. A change accepted for a schedule whose occurrence a stage already holds
drops the stage, so the ACCEPTED result is never followed by the old version.
A process that commits a stage after losing its partitions (a zombie the
group has already replaced) can send an occurrence twice, with the same
occurrence id, as any at-least-once redelivery.

A stage holds occurrences only, never changelog records: the timeline
tombstones of what it sent are written by ordinary turns after its commit. So
a stage left open by a dead owner never stands between a restore and the
committed end of a changelog. Its transactional id is named after one of the
partitions it covers (`transactional_id`), and every process opens the stage
producers of the partitions it is assigned before restoring them: a new owner,
whatever its instance id, fences and aborts the dead owner's stage at once.

Pure: the runtime produces and commits, this module decides and keeps count.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from scheduler.engine.overlap import ALLOW
from scheduler.engine.timeline_keys import DISPATCH, lane_bound

COUNT_EVERY_MS = 2_000  # how often the instants within the longest lead are counted again
MARGIN_MS = 1_000   # a burst closer than this is left to ordinary dispatch
LEAD_SLACK_MS = 3_000  # added to every lead: time to commit, and a window wide enough not to be missed
LEAD_FACTOR = 1.5   # the lead covers the staging time this many times over


def transactional_id(prefix: str, partition: int) -> str:
    """A stage's transactional id belongs to a schedule partition, not to a process: whoever owns the
    partition next initialises it, which aborts a stage its previous owner left open."""
    return f"{prefix}.scheduler.stage.p{partition}"


def instant_range(due_ms: int) -> tuple[bytes, bytes]:
    """[first, after last) timeline key of the strict entries due exactly at `due_ms`."""
    return lane_bound(DISPATCH, due_ms - 1), lane_bound(DISPATCH, due_ms)


def lead_ms(count: int, rate_per_s: float, max_lead_ms: int) -> int:
    """How long before its instant a burst of `count` must start staging to be done in time."""
    return min(max_lead_ms, int(count / max(rate_per_s, 1.0) * 1000 * LEAD_FACTOR) + LEAD_SLACK_MS)


def should_start(due_ms: int, count: int, now_ms: int, minimum: int, rate_per_s: float, max_lead_ms: int) -> bool:
    """Stage a burst once it is big enough and its instant is within the lead, not too close to make it."""
    if count < minimum or due_ms - now_ms <= MARGIN_MS:
        return False
    return due_ms - now_ms <= lead_ms(count, rate_per_s, max_lead_ms)


def choose(counts: dict[int, int], now_ms: int, minimum: int, rate_per_s: float, max_lead_ms: int) -> int | None:
    """Of the strict entries counted per due instant, the earliest instant whose burst should start staging."""
    ready = [due for due, count in counts.items()
             if should_start(due, count, now_ms, minimum, rate_per_s, max_lead_ms)]
    return min(ready, default=None)


def stageable(overlap: str, concurrency_limited: bool) -> bool:
    """Overlap policies and running slots are decided at dispatch, against what is running then."""
    return overlap == ALLOW and not concurrency_limited


@dataclass
class StagedPartition:
    """What one schedule partition's part of a stage has produced so far."""

    start: bytes                   # the instant's first key
    end: bytes                     # after its last key
    cursor: bytes = field(init=False)  # the next key to look at
    sent: list[bytes] = field(default_factory=list)  # timeline keys produced so far, in key order
    sent_keys: set[bytes] = field(default_factory=set)  # the same, for changes that would contradict it
    first_skipped: bytes | None = None  # the first entry left to ordinary dispatch
    done: bool = False

    def __post_init__(self) -> None:
        self.cursor = self.start

    def resume_floor(self) -> bytes:
        """Where the partition's dispatch scan may start once the stage's entries are gone: at the first
        entry it left behind, else just past the last it sent."""
        if self.first_skipped is not None:
            return self.first_skipped
        return self.sent[-1] + b"\x00" if self.sent else self.cursor


@dataclass
class Stage:
    due_ms: int
    partitions: dict[int, StagedPartition]
    started_ms: int
    producer_partition: int  # whose stage producer holds the transaction
    tokens: Counter[str] = field(default_factory=Counter)  # trigger-rate tokens taken, per tenant
    completed_ms: int | None = None

    @property
    def count(self) -> int:
        return sum(len(p.sent) for p in self.partitions.values())

    @property
    def complete(self) -> bool:
        return all(p.done for p in self.partitions.values())

    def shares(self, budget: int) -> dict[int, int]:
        """Split a turn's staging budget evenly over the partitions still staging."""
        open_parts = [n for n, p in self.partitions.items() if not p.done]
        share = max(1, -(-budget // max(1, len(open_parts))))
        return {n: share for n in open_parts}

    def rate_per_s(self) -> float | None:
        """Occurrences staged per second of wall time, for the next stage's lead."""
        if self.completed_ms is None or self.count == 0:
            return None
        return self.count / max(0.001, (self.completed_ms - self.started_ms) / 1000)
