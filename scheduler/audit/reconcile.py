"""Reconciliation, pure: what each expected occurrence became, what nobody expected, how late it was.

Classification of an expected occurrence, first match wins:

0. no dispatch row at all: its event (by id, or a summarised range covering its instant), else
   ABSENT - worker reports or a dead letter without a dispatch prove a lost ledger row, not a run;
1. the latest final report: SUCCEEDED or SKIPPED_STALE (a worker's attempt step) or DEAD (a dead
   letter), by time;
2. an occurrence event about its id (the OccurrenceEventKind symbols: MISSED, SKIPPED_PAUSED,
   INVALIDATED, SKIPPED_OVERLAP, CANCELED) - an event after a dispatch is a dropped retry;
3. FAILED then re-dispatched: RETRIED; FAILED with no later dispatch (the retry waits): FAILED;
4. STARTED or HEARTBEAT only: RUNNING; dispatched with no worker report: ENQUEUED;

A fire of a paused version is SKIPPED_PAUSED (its SKIPPED_PAUSED event, found by schedule and
instant, gives the id the engine used), never ABSENT. A dispatch whose id is not expected - or is
a paused fire's - is UNEXPECTED. Enqueue lag is the Kafka record timestamp minus
available_at_ms - scheduled_for for strict jobs, the jitter slot for flexible ones, the retry or
re-run instant for attempts > 1 - with catch-up replays (lateness by design) counted apart.
"""
from __future__ import annotations

import math
from collections import Counter, defaultdict
from dataclasses import dataclass, field, replace

from scheduler.audit.expected import PAUSED, Expected, VersionSpan, expected_occurrences
from scheduler.audit.ledger import FAILED_STEP, FINAL_STEPS, LIVE_STEPS, AttemptSummary, DispatchRow, EventRow, Ledger
from scheduler.audit.vocabulary import attempt_kinds, occurrence_event_kinds
from scheduler.timing.instants import to_datetime
from scheduler.timing.occurrence_id import occurrence_id

EVENT_KINDS = occurrence_event_kinds()
SUCCEEDED, SKIPPED_STALE = FINAL_STEPS
FAILED = FAILED_STEP
assert {*FINAL_STEPS, *LIVE_STEPS, FAILED_STEP} <= set(attempt_kinds()), "AttemptKind changed"
SKIPPED_PAUSED = "SKIPPED_PAUSED"
assert SKIPPED_PAUSED in EVENT_KINDS, "OccurrenceEventKind changed"
DEAD, RETRIED, RUNNING, ENQUEUED, ABSENT = "DEAD", "RETRIED", "RUNNING", "ENQUEUED", "ABSENT"
CLASSIFICATIONS = (SUCCEEDED, DEAD, SKIPPED_STALE, RETRIED, FAILED, RUNNING, ENQUEUED, *EVENT_KINDS, ABSENT)


@dataclass(frozen=True, slots=True)
class Classified:
    expected: Expected
    classification: str
    deliveries: int
    attempts_failed: int


@dataclass(frozen=True, slots=True)
class Unexpected:
    occurrence_id: str
    schedule_id: str
    schedule_version: int
    scheduled_for_ms: int
    deliveries: int


@dataclass(frozen=True, slots=True)
class LagStats:
    count: int
    p50_ms: int
    p99_ms: int
    max_ms: int


@dataclass
class Report:
    occurrences: list[Classified]
    unexpected: list[Unexpected]
    spans: list[VersionSpan]
    deliveries: Counter[int]                      # deliveries per id -> how many ids
    duplicates: list[tuple[str, int, int]]        # (id, attempt, times delivered) with times > 1
    id_mismatches: list[DispatchRow]              # dispatched id != occurrence_id(schedule, version, instant)
    lag: dict[str, LagStats]                      # tenant -> lag of ordinary dispatches
    catch_up_lag: dict[str, LagStats]             # tenant -> lag of catch-up replays
    warnings: list[str] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        found = Counter(c.classification for c in self.occurrences)
        return {name: found.get(name, 0) for name in CLASSIFICATIONS}

    def absent(self) -> list[Classified]:
        return [c for c in self.occurrences if c.classification == ABSENT]

    @property
    def ok(self) -> bool:
        return not self.unexpected and not self.absent()


def percentile(ordered: list[int], q: float) -> int:
    """Nearest rank: the smallest value with at least q of them at or below it."""
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def lag_stats(values: list[int]) -> LagStats | None:
    if not values:
        return None
    ordered = sorted(values)
    return LagStats(len(ordered), percentile(ordered, 0.5), percentile(ordered, 0.99), ordered[-1])


class _Index:
    """The ledger's rows by occurrence id (and the id-less range events by schedule)."""

    def __init__(self, ledger: Ledger, dispatches: list[DispatchRow]) -> None:
        self.dispatches: dict[str, list[DispatchRow]] = defaultdict(list)
        for d in dispatches:
            self.dispatches[d.occurrence_id].append(d)
        self.events: dict[str, list[EventRow]] = defaultdict(list)
        self.paused_at: dict[tuple[str, int], EventRow] = {}
        self.ranges: dict[str, list[EventRow]] = defaultdict(list)
        for e in ledger.events:
            if e.kind not in EVENT_KINDS:
                continue
            if e.occurrence_id is not None:
                self.events[e.occurrence_id].append(e)
                if e.kind == SKIPPED_PAUSED and e.scheduled_for_ms is not None:
                    self.paused_at[(e.schedule_id, e.scheduled_for_ms)] = e
            elif e.range_first_ms is not None and e.range_last_ms is not None:
                self.ranges[e.schedule_id].append(e)
        self.attempts: dict[str, AttemptSummary] = {a.occurrence_id: a for a in ledger.attempts}
        self.dead: dict[str, int] = {}
        for dl in ledger.dead_letters:
            self.dead[dl.occurrence_id] = max(dl.dead_at_ms, self.dead.get(dl.occurrence_id, dl.dead_at_ms))

    def range_kind(self, item: Expected) -> str | None:
        for e in self.ranges.get(item.schedule_id, ()):
            first, last = e.range_first_ms, e.range_last_ms  # never None here: only ranges are kept
            if first is not None and last is not None and first <= item.scheduled_for_ms <= last:
                return e.kind
        return None


def _classify(item: Expected, index: _Index) -> tuple[str, int]:
    oid = item.occurrence_id
    events = index.events.get(oid)
    latest_event = max(events, key=lambda e: e.recorded_at_ms).kind if events else None
    if item.origin == PAUSED:  # nothing runs while paused: only the engine's events say more
        return latest_event or index.range_kind(item) or SKIPPED_PAUSED, 0
    sent = index.dispatches.get(oid, ())
    if not sent:  # a worker's or dead letter's word is no proof of a dispatch the ledger lacks
        return latest_event or index.range_kind(item) or ABSENT, 0
    steps = index.attempts.get(oid)
    failed = steps.failed if steps is not None else 0
    finals = [(steps.final_at_ms, steps.final_kind)] if steps is not None and steps.final_kind is not None else []
    if oid in index.dead:
        finals.append((index.dead[oid], DEAD))
    if finals:
        return max(finals)[1], failed
    if latest_event:
        return latest_event, failed
    if steps is not None and steps.max_failed_attempt is not None:
        return (RETRIED if any(d.attempt > steps.max_failed_attempt for d in sent) else FAILED), failed
    return (RUNNING if steps is not None and steps.started else ENQUEUED), 0


def _with_recorded_id(item: Expected, index: _Index) -> Expected:
    """A paused fire's id is the one the engine gave it in its SKIPPED_PAUSED event (old or resumed version)."""
    if item.origin != PAUSED:
        return item
    event = index.paused_at.get((item.schedule_id, item.scheduled_for_ms))
    if event is None or event.occurrence_id is None:
        return item
    return replace(item, occurrence_id=event.occurrence_id, schedule_version=event.schedule_version)


def _lags(dispatches: list[DispatchRow]) -> tuple[dict[str, LagStats], dict[str, LagStats]]:
    ordinary: dict[str, list[int]] = defaultdict(list)
    catch_up: dict[str, list[int]] = defaultdict(list)
    for d in dispatches:
        (catch_up if d.catch_up else ordinary)[d.tenant].append(d.enqueued_at_ms - d.available_at_ms)
    return ({t: s for t, v in ordinary.items() if (s := lag_stats(v))},
            {t: s for t, v in catch_up.items() if (s := lag_stats(v))})


def _id_mismatches(dispatches: list[DispatchRow], expected: dict[str, Expected]) -> list[DispatchRow]:
    """An expected id was computed from the same (schedule, version, instant): only the others need the recipe."""
    checked: dict[tuple[str, int, int], str] = {}
    wrong = []
    for d in dispatches:
        key = (d.schedule_id, d.schedule_version, d.scheduled_for_ms)
        known = expected.get(d.occurrence_id)
        if known is not None and (known.schedule_id, known.schedule_version, known.scheduled_for_ms) == key:
            continue
        if key not in checked:
            checked[key] = occurrence_id(d.schedule_id, d.schedule_version, to_datetime(d.scheduled_for_ms))
        if checked[key] != d.occurrence_id:
            wrong.append(d)
    return wrong


def reconcile(ledger: Ledger, from_ms: int, to_ms: int) -> Report:
    """`ledger` holds the tenant's versions and results and its rows about [from, to); dispatches outside
    the window are left out here too, so a wider read changes nothing."""
    expected, spans, warnings = expected_occurrences(ledger.versions, ledger.results, from_ms, to_ms)
    dispatches = [d for d in ledger.dispatches if from_ms <= d.scheduled_for_ms < to_ms]
    index = _Index(ledger, dispatches)
    occurrences = []
    for item in expected:
        item = _with_recorded_id(item, index)
        classification, failed = _classify(item, index)
        occurrences.append(Classified(item, classification, len(index.dispatches.get(item.occurrence_id, ())), failed))
    recomputed = {c.expected.occurrence_id: c.expected for c in occurrences}
    known = {oid for oid, e in recomputed.items() if e.origin != PAUSED}
    unexpected = []
    for oid, sent in sorted(index.dispatches.items(), key=lambda kv: (kv[1][0].schedule_id, kv[1][0].scheduled_for_ms)):
        if oid not in known:
            first = sent[0]
            unexpected.append(Unexpected(oid, first.schedule_id, first.schedule_version, first.scheduled_for_ms,
                                         len(sent)))
    per_attempt = Counter((d.occurrence_id, d.attempt) for d in dispatches)
    duplicates = sorted((oid, attempt, n) for (oid, attempt), n in per_attempt.items() if n > 1)
    lag, catch_up_lag = _lags(dispatches)
    return Report(occurrences, unexpected, spans, Counter(len(v) for v in index.dispatches.values()), duplicates,
                  _id_mismatches(dispatches, recomputed), lag, catch_up_lag, warnings)
