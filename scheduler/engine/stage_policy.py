"""Staged bursts: a large set of strict occurrences due at one instant is sent ahead of it, invisibly.

At the top of the hour the per-occurrence work (read the entry, produce the
occurrence and its timeline tombstone, commit) for hundreds of thousands of
occurrences takes longer than the 5 s SLO on small hardware. So in the seconds
before the instant the runtime produces them in a transaction of a second
producer and commits it when the instant comes: `read_committed` workers see
nothing before the commit and everything right after it. The staged records
are durable before their instant; the commit at the instant only writes the
transaction markers.

The price: while a stage's transaction is open, a `read_committed` reader of a
partition it has written cannot read past its first record there (the last
stable offset), so other occurrences sent to those partitions in the meantime
become visible at the commit as well. So a stage is prepared in memory during
its lead (scan, tokens, the records cut out of the entries: no transaction) and
its transaction is begun and produced only in a short produce window before the
instant, sized from the measured produce rate of the previous stage
(`produce_lead_ms`); occurrences due before that window are not held at all.

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

import bisect
from collections import Counter
from dataclasses import dataclass, field

from scheduler.engine import stage_phase
from scheduler.engine.overlap import ALLOW
from scheduler.engine.stage_layout import TopicLayout
from scheduler.engine.stage_phase import StagePhase
from scheduler.engine.timeline_keys import DISPATCH, lane_bound

COUNT_EVERY_MS = 2_000  # how often the instants within the longest lead are counted again
MARGIN_MS = 1_000   # a burst closer than this is left to ordinary dispatch
LEAD_SLACK_MS = 3_000  # added to every lead: time to commit, and a window wide enough not to be missed
LEAD_FACTOR = 1.5   # the lead covers the staging time this many times over
PRODUCE_FACTOR = 1.25  # the produce window covers the measured produce time this many times over
PRODUCE_MARGIN_MS = 500  # added to every produce window: the first records' round trip, a loaded core
PRODUCE_SLICE_S = 0.05  # a stage's records are produced in slices this long, with the turns in between
PRODUCE_MAX_MS = 10_000  # the longest produce window: a larger burst is committed late rather than hold longer
TOKEN_BLOCK = 4_096  # trigger-rate tokens a stage takes for a tenant at a time; what it does not use goes back


def transactional_id(prefix: str, partition: int) -> str:
    """A stage's transactional id belongs to a schedule partition, not to a process: whoever owns the
    partition next initialises it, which aborts a stage its previous owner left open."""
    return f"{prefix}.scheduler.stage.p{partition}"


def instant_range(due_ms: int) -> tuple[bytes, bytes]:
    """[first, after last) timeline key of the strict entries due exactly at `due_ms`."""
    return lane_bound(DISPATCH, due_ms - 1), lane_bound(DISPATCH, due_ms)


def produce_lead_ms(count: int, produce_rate_per_s: float) -> int:
    """How long before its instant a stage of `count` prepared records begins its transaction: long enough
    to produce and flush them all at the measured rate, no longer, since every moment of it holds back the
    readers of the partitions it writes."""
    return min(PRODUCE_MAX_MS, int(count / max(produce_rate_per_s, 1.0) * 1000 * PRODUCE_FACTOR) + PRODUCE_MARGIN_MS)


def should_produce(due_ms: int, count: int, now_ms: int, produce_rate_per_s: float) -> bool:
    """Whether a stage's produce window has come (its preparation stops there, what it missed goes the
    ordinary way); `count` is what it has prepared, or what it expects while it is still preparing."""
    return now_ms >= due_ms - produce_lead_ms(count, produce_rate_per_s)


def lead_ms(count: int, rate_per_s: float, max_lead_ms: int, produce_ms: int = 0) -> int:
    """How long before its instant a burst of `count` must start preparing to be done in time: its
    preparation at `rate_per_s`, then its produce window (`produce_ms`)."""
    return min(max_lead_ms, int(count / max(rate_per_s, 1.0) * 1000 * LEAD_FACTOR) + LEAD_SLACK_MS + produce_ms)


def should_start(due_ms: int, count: int, now_ms: int, minimum: int, rate_per_s: float, max_lead_ms: int,
                 produce_rate_per_s: float = float("inf")) -> bool:
    """Stage a burst once it is big enough and its instant is within the lead, not too close to make it."""
    if count < minimum or due_ms - now_ms <= MARGIN_MS:
        return False
    produce_ms = produce_lead_ms(count, produce_rate_per_s)
    return due_ms - now_ms <= lead_ms(count, rate_per_s, max_lead_ms, produce_ms)


def choose(counts: dict[int, int], now_ms: int, minimum: int, rate_per_s: float, max_lead_ms: int,
           produce_rate_per_s: float = float("inf")) -> int | None:
    """Of the strict entries counted per due instant, the earliest instant whose burst should start staging."""
    ready = [due for due, count in counts.items()
             if should_start(due, count, now_ms, minimum, rate_per_s, max_lead_ms, produce_rate_per_s)]
    return min(ready, default=None)


def give_back(left: dict[bytes, int]) -> dict[str, int]:
    """Tokens a stage took in blocks and did not use, per tenant, once its preparation ends."""
    return {tenant.decode(): n for tenant, n in left.items() if n > 0}


def stageable(overlap: str, concurrency_limited: bool) -> bool:
    """Overlap policies and running slots are decided at dispatch, against what is running then."""
    return overlap == ALLOW and not concurrency_limited


@dataclass
class StagedPartition:
    """What one schedule partition's part of a stage has produced so far."""

    start: bytes                   # the instant's first key
    end: bytes                     # after its last key
    cursor: bytes = field(init=False)  # the next key to look at
    sent: list[bytes] = field(default_factory=list)  # timeline keys prepared so far, in key order
    first_skipped: bytes | None = None  # the first entry left to ordinary dispatch
    done: bool = False

    def __post_init__(self) -> None:
        self.cursor = self.start

    def holds(self, key: bytes) -> bool:
        """Whether `key` is among the entries prepared (a binary search: `sent` is in key order, and a set
        beside it cost a tenth of the preparation's time for a check that runs only on a turn's changes)."""
        i = bisect.bisect_left(self.sent, key)
        return i < len(self.sent) and self.sent[i] == key

    def resume_floor(self) -> bytes:
        """Where the partition's dispatch scan may start once the stage's entries are gone: at the first
        entry it left behind, else just past the last it sent."""
        if self.first_skipped is not None:
            return self.first_skipped
        return self.sent[-1] + b"\x00" if self.sent else self.cursor


@dataclass
class Stage:
    """One burst's stage: what it holds and what it measured, and its phase (stage_phase.py), which only
    `advance` changes; the measurements are for the next stage's lead and the logs, never read as the phase."""

    due_ms: int
    partitions: dict[int, StagedPartition]
    started_ms: int
    producer_partition: int  # whose stage producer holds the transaction
    tokens: Counter[str] = field(default_factory=Counter)  # trigger-rate tokens taken, per tenant
    expected: int = 0  # strict entries counted at the instant when the stage began
    completed_ms: int | None = None  # when its preparation ended
    prepared: dict[int, dict[bytes, tuple[list[bytes], list[bytes]]]] = field(default_factory=dict)  # partition ->
    # topic -> (values, keys): stage_records.prepare
    left: dict[bytes, int] = field(default_factory=dict)  # tokens taken and not yet used, per tenant (bytes)
    prepare_s: float = 0.0  # seconds of work preparing (not the wall time of the lead: turns run in between)
    produce_s: float | None = None  # begin to all delivered (wall time, turns in between); None until then
    produce_work_s: float = 0.0  # seconds of work producing (the slices, and any wait for delivery at the instant)
    produced_ms: int | None = None  # when the transaction was begun (from then on it holds back readers)
    layouts: dict[str, TopicLayout] = field(default_factory=dict)  # topic -> where its records go (stage_layout)
    phase: StagePhase = StagePhase.PREPARING

    def advance(self, to: StagePhase) -> None:
        """Go on to `to`; a step its phase does not allow raises StageTransitionError."""
        self.phase = stage_phase.advance(self.phase, to)

    @property
    def count(self) -> int:
        return sum(len(p.sent) for p in self.partitions.values())

    @property
    def scanned(self) -> bool:
        """Every partition's scan of the instant has ended (reached its end, or was cut short)."""
        return all(p.done for p in self.partitions.values())

    def shares(self, budget: int) -> dict[int, int]:
        """Split a turn's staging budget evenly over the partitions still staging."""
        open_parts = [n for n, p in self.partitions.items() if not p.done]
        share = max(1, -(-budget // max(1, len(open_parts))))
        return {n: share for n in open_parts}

    @property
    def producing(self) -> bool:
        """Its transaction is open: the turns keep the topics it writes to the partitions it left free."""
        return self.phase in stage_phase.TRANSACTION_OPEN

    def rate_per_s(self) -> float | None:
        """Occurrences prepared per second of wall time, for the next stage's lead."""
        if self.completed_ms is None or self.count == 0:
            return None
        return self.count / max(0.001, (self.completed_ms - self.started_ms) / 1000)

    def produce_rate_per_s(self) -> float | None:
        """Occurrences produced and flushed per second, for the next stage's produce window."""
        if self.produce_s is None or self.count == 0:
            return None
        return self.count / max(0.001, self.produce_s)

    def window_count(self) -> int:
        """The records the produce window must cover: those prepared, or while preparing those expected."""
        return self.count if self.scanned else max(self.count, self.expected)

    def cut_short(self) -> None:
        """The produce window came before preparation ended: every partition stops where it is, and the
        rest of the instant goes the ordinary way."""
        for part in self.partitions.values():
            if not part.done:
                if part.first_skipped is None:
                    part.first_skipped = part.cursor
                part.done = True
