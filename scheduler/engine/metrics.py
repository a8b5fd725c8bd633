"""Prometheus metrics of one scheduler process: the figures that prove (or break) the SLO.

Observed per loop turn, not per record: the dispatched entries of a turn are grouped by due
instant, so the lag histogram costs one update per distinct instant. What a turn selected is held
until its transaction commits and dropped if it aborts, so the counters only count what workers
can see. Each process has its own registry, served over HTTP with the health probes by
``scheduler.health.endpoint`` (`scheduler run --metrics-port`); `heartbeat` is the loop's, for /healthz.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, Gauge, Histogram
from prometheus_client import Counter as PromCounter
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

from scheduler.engine.timeline_keys import CATCH_UP, DISPATCH, due_ms_of
from scheduler.engine.weighted_histogram import WeightedHistogram
from scheduler.health.probes import Heartbeat

COMMIT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
LAG_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 3.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0)
LANES = {DISPATCH: "strict", CATCH_UP: "catch_up"}


@dataclass(frozen=True)
class PartitionReading:
    """One partition after a committed turn: its next strict entry due, its next fire not yet planned, and
    how many entries are due and schedules have a due fire not yet planned (each counted up to a cap)."""

    partition: int
    next_due_ms: int | None
    next_wake_ms: int | None
    due_entries: int
    due_unplanned: int


@dataclass
class _Turn:
    """What the open transaction dispatched and held back, applied when it commits."""

    lags: Counter[tuple[str, int]] = field(default_factory=Counter)  # (lane, due_ms) -> entries
    held_back: Counter[str] = field(default_factory=Counter)         # tenant -> entries held by its limit


class EngineMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else _process_registry()
        r = self.registry
        self.schedule_lag = WeightedHistogram(
            "scheduler_schedule_lag_seconds",
            "Time from an occurrence's due instant (available_at; scheduled_for for strict ones) to the "
            "transaction that enqueued it",
            ["lane"], LAG_BUCKETS, r)
        self.dispatched = PromCounter("scheduler_occurrences_dispatched", "Occurrences enqueued (committed)",
                                      ["lane"], registry=r)
        self.due_backlog = Gauge(
            "scheduler_due_backlog",
            "Occurrences due and not sent after the last turn: timeline entries due, and schedules whose next "
            "fire is due but not yet planned (counted up to 1,000 of each per partition)",
            ["partition"], registry=r)
        self.oldest_overdue = Gauge("scheduler_oldest_overdue_seconds",
                                    "Age of the oldest due occurrence not yet sent, planned or not (0 when none "
                                    "is due)",
                                    ["partition"], registry=r)
        self.horizon_lag = Gauge(
            "scheduler_horizon_materialization_lag_seconds",
            "How far inside the planning lead (the horizon less its stride) the oldest unplanned fire lies "
            "(0 when planning keeps up)",
            ["partition"], registry=r)
        self.occurrence_events = PromCounter(
            "scheduler_occurrence_events",
            "Occurrences the scheduler decided not to send, by event kind (missed, skipped, invalidated, ...)",
            ["kind"], registry=r)
        self.commit_latency = Histogram(
            "scheduler_transaction_commit_seconds", "commit_transaction latency",
            buckets=COMMIT_BUCKETS, registry=r)
        self.dead = PromCounter("scheduler_occurrences_dead",
                                "Occurrences sent to the tenant's dead letters after their last attempt",
                                ["tenant"], registry=r)
        self.transactions = PromCounter("scheduler_transactions", "Loop-turn transactions by outcome",
                                        ["outcome"], registry=r)
        self.inputs_deferred = PromCounter("scheduler_inputs_deferred",
                                           "Input records a turn left to the next one: its input slice was spent",
                                           registry=r)
        self.held_back = PromCounter("scheduler_tenant_held_back",
                                     "Due occurrences a tenant's trigger-rate limit held back for a later turn",
                                     ["tenant"], registry=r)
        self.concurrency_held_back = PromCounter(
            "scheduler_tenant_concurrency_held_back",
            "Due occurrences held back for a later turn because the tenant had no free running slot",
            ["tenant"], registry=r)
        self.staged_occurrences = PromCounter(
            "scheduler_staged_occurrences",
            "Strict occurrences of a burst produced ahead of their instant, by what became of the stage "
            "(committed at the instant, or dropped: they then went the ordinary way)", ["outcome"], registry=r)
        self.stage_commit_latency = Histogram(
            "scheduler_stage_commit_seconds", "commit_transaction latency of a staged burst at its instant",
            buckets=COMMIT_BUCKETS, registry=r)
        self.restoring = Gauge("scheduler_partitions_restoring", "Partitions whose stores are being restored",
                               registry=r)
        self.restored_records = PromCounter("scheduler_restore_records", "Changelog records applied on restore",
                                            ["store"], registry=r)
        self.restore_held = Gauge(
            "scheduler_restore_held_by_open_transaction_seconds",
            "How long a partition's restore has been waiting at a transaction of a previous owner that is "
            "still open (0 once it ended); past the bound the restore fails instead", ["changelog", "partition"],
            registry=r)
        self.restore_seconds = Histogram("scheduler_restore_seconds", "Time to restore one partition's stores",
                                         buckets=(0.1, 0.5, 1.0, 5.0, 15.0, 60.0, 300.0), registry=r)
        self.restore_remaining = Gauge(
            "scheduler_restore_remaining_offsets",
            "Changelog offsets a partition's restore still has to read (all its stores; gone once it is done)",
            ["partition"], registry=r)
        self.restore_eta = Gauge(
            "scheduler_restore_eta_seconds",
            "Time a partition's restore should still take at its rate so far (gone once it is done)",
            ["partition"], registry=r)
        self.restore_cancelled = PromCounter(
            "scheduler_restores_cancelled", "Restores dropped because their partition was revoked first", registry=r)
        self.time_to_dispatch = Histogram(
            "scheduler_assignment_to_dispatch_seconds",
            "From a partition's assignment to its task dispatching (restore included): how long the partition "
            "was not served by anyone once it reached this process",
            buckets=(0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0), registry=r)
        self.owned = Gauge("scheduler_owned_partitions", "Input partitions this process owns", registry=r)
        self.partition_owned = Gauge(
            "scheduler_partition_owned",
            "1 for each input partition this process owns (restoring or dispatching); gone once it is revoked",
            ["partition"], registry=r)
        self.ownership_changes = PromCounter("scheduler_partition_ownership_changes",
                                             "Partitions assigned to or revoked from this process", ["change"],
                                             registry=r)
        self.standby_partitions = Gauge(
            "scheduler_standby_partitions", "Partitions this process keeps warm copies of (scheduler run --standbys)",
            registry=r)
        self.standby_copy = Gauge("scheduler_standby_copy",
                                  "1 for each partition this process keeps a warm copy of; gone once it is dropped",
                                  ["partition"], registry=r)
        self.standby_lag_records = Gauge(
            "scheduler_standby_lag_records",
            "Changelog offsets a standby copy is behind the ends of its partition's changelogs (summed over the "
            "stores; a transaction marker counts one): about what a takeover would replay",
            ["partition"], registry=r)
        self.standby_records = PromCounter("scheduler_standby_records",
                                           "Changelog records applied to standby copies", registry=r)
        self._standbys: set[int] = set()  # partitions with a copy open
        self._turn = _Turn()
        self.heartbeat = Heartbeat()  # the main loop's, for /healthz

    def turned(self) -> None:
        """The main loop finished a turn (idle or not): it is alive."""
        self.heartbeat.beat()

    # -- one transaction --------------------------------------------------------------

    def selected(self, lane: bytes, now_ms: int, chosen: Iterable[tuple[Any, bytes, Any]],
                 held_back: dict[str, int]) -> None:
        """Record a selection of (dispatcher, timeline key, entry) and the entries held back per tenant."""
        name = LANES[lane]
        per_due: Counter[int] = Counter()
        for _, key, _ in chosen:
            per_due[due_ms_of(key)] += 1
        turn = self._turn
        for due, n in per_due.items():
            turn.lags[(name, due)] += n
        turn.held_back.update(held_back)

    def committed(self, enqueued_ms: int, commit_seconds: float, events: Mapping[str, int],
                  dead: Mapping[str, int] | None = None, concurrency_held: Mapping[str, int] | None = None) -> None:
        """Count a committed turn; `events` is occurrences not sent per event kind; `dead` and
        `concurrency_held` (held back by max_concurrency) are per tenant."""
        turn, self._turn = self._turn, _Turn()
        self.transactions.labels("committed").inc()
        self.commit_latency.observe(commit_seconds)
        for (lane, due_ms), n in turn.lags.items():
            self.schedule_lag.observe_many((lane,), max(0, enqueued_ms - due_ms) / 1000, n)
            self.dispatched.labels(lane).inc(n)
        for tenant, n in turn.held_back.items():
            self.held_back.labels(tenant).inc(n)
        for kind, n in events.items():
            self.occurrence_events.labels(kind).inc(n)
        for tenant, n in (dead or {}).items():
            self.dead.labels(tenant).inc(n)
        for tenant, n in (concurrency_held or {}).items():
            self.concurrency_held_back.labels(tenant).inc(n)

    def staged(self, due_ms: int, visible_ms: int, count: int, commit_seconds: float) -> None:
        """A staged burst's commit made `count` strict occurrences visible at `visible_ms`."""
        self.staged_occurrences.labels("committed").inc(count)
        self.stage_commit_latency.observe(commit_seconds)
        self.schedule_lag.observe_many((LANES[DISPATCH],), max(0, visible_ms - due_ms) / 1000, count)
        self.dispatched.labels(LANES[DISPATCH]).inc(count)

    def stage_dropped(self, count: int) -> None:
        self.staged_occurrences.labels("dropped").inc(count)

    def aborted(self) -> None:
        self._turn = _Turn()
        self.transactions.labels("aborted").inc()

    def partitions(self, now_ms: int, lead_ms: int, readings: Iterable[PartitionReading]) -> None:
        """After a committed turn, per partition: what is due and not sent (`PartitionReading`), and how far
        planning is behind its lead. A fire not yet planned when its instant passed is overdue as much as
        an entry not yet sent: both count."""
        for reading in readings:
            label = str(reading.partition)
            overdue_since = min((at for at in (reading.next_due_ms, reading.next_wake_ms)
                                 if at is not None and at <= now_ms), default=None)
            self.oldest_overdue.labels(label).set(0 if overdue_since is None else (now_ms - overdue_since) / 1000)
            self.due_backlog.labels(label).set(reading.due_entries + reading.due_unplanned)
            wake = reading.next_wake_ms
            behind = max(0, now_ms + lead_ms - wake) / 1000 if wake is not None else 0.0
            self.horizon_lag.labels(label).set(behind)

    # -- partition ownership --------------------------------------------------------------

    def restore_waiting(self, changelog: str, partition: int, seconds: float) -> None:
        self.restore_held.labels(changelog, str(partition)).set(seconds)

    def restore_progress(self, partition: int, remaining: int, eta_s: float | None) -> None:
        self.restore_remaining.labels(str(partition)).set(remaining)
        if eta_s is not None:
            self.restore_eta.labels(str(partition)).set(eta_s)

    def restore_progress_done(self, partition: int) -> None:
        _remove_series(partition, self.restore_remaining, self.restore_eta)

    def partition_started(self, partition: int, applied: Mapping[str, int], restore_s: float,
                          since_assigned_s: float) -> None:
        """A partition's restore is done and its task dispatches, `since_assigned_s` after its assignment."""
        self.restore_progress_done(partition)
        self.restore_seconds.observe(restore_s)
        self.time_to_dispatch.observe(since_assigned_s)
        for store, n in applied.items():
            self.restored_records.labels(store).inc(n)

    def assigned(self, partitions: Sequence[int], owned: int) -> None:
        self._ownership("assigned", partitions, owned)
        for partition in partitions:
            self.partition_owned.labels(str(partition)).set(1)

    def revoked(self, partitions: Sequence[int], owned: int) -> None:
        self._ownership("revoked", partitions, owned)
        for partition in partitions:
            _remove_series(partition, self.due_backlog, self.oldest_overdue, self.horizon_lag, self.partition_owned)

    def _ownership(self, change: str, partitions: Sequence[int], owned: int) -> None:
        self.ownership_changes.labels(change).inc(len(partitions))
        self.owned.set(owned)

    # -- standby copies ------------------------------------------------------------------

    def standby_opened(self, partition: int) -> None:
        self.standby_copy.labels(str(partition)).set(1)
        self._standbys.add(partition)
        self.standby_partitions.set(len(self._standbys))

    def standby_lag(self, partition: int, behind: int) -> None:
        self.standby_lag_records.labels(str(partition)).set(behind)

    def standby_dropped(self, partition: int) -> None:
        self._standbys.discard(partition)
        _remove_series(partition, self.standby_copy, self.standby_lag_records)
        self.standby_partitions.set(len(self._standbys))

    def standby_applied(self, records: int) -> None:
        self.standby_records.inc(records)


def _remove_series(partition: int, *gauges: Gauge) -> None:
    """Drop `partition`'s series of each gauge; one it never had is no error."""
    for gauge in gauges:
        try:
            gauge.remove(str(partition))
        except KeyError:
            pass


def _process_registry() -> CollectorRegistry:
    """A registry of our own (tests run several engines in one interpreter) plus process/GC/platform facts."""
    registry = CollectorRegistry()
    ProcessCollector(registry=registry)
    GCCollector(registry=registry)
    PlatformCollector(registry=registry)
    return registry

