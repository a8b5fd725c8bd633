"""`scheduler reconcile --follow`: the online reconciler. Each window of `--window` (aligned to the epoch)
is reconciled once it has been closed for `--settle` (the sink's delay behind the topics, so that a row
on its way is not taken for a loss), with the streamed reconcile of scheduler/audit/streamed_report.py;
the counts go to Prometheus counters and each ABSENT or UNEXPECTED id is printed once, when its window
is reconciled. A silently lost occurrence is then an alert settle + one window after its instant.

The window arithmetic is pure (`first_window`, `due_in_ms`); the loop does the I/O.
"""
from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TextIO

import psycopg
from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.process_collector import ProcessCollector

from scheduler.audit.reconcile import ABSENT, CLASSIFICATIONS
from scheduler.health.probes import Heartbeat, Probe, alive

LOG = logging.getLogger("scheduler.reconcile.follow")
RETRY_S = 5.0  # after a lost database, before the same window is tried again


def first_window(now_ms: int, window_ms: int, settle_ms: int, from_ms: int | None = None) -> int:
    """Start of the first window to reconcile: `from_ms` (a catch-up from there) aligned down to a window,
    else the last window that has already been closed for `settle_ms`."""
    if from_ms is not None:
        return from_ms - from_ms % window_ms
    closed_end = (now_ms - settle_ms) - (now_ms - settle_ms) % window_ms
    return closed_end - window_ms


def due_in_ms(start_ms: int, now_ms: int, window_ms: int, settle_ms: int) -> int:
    """How long until [start, start + window) may be reconciled (0 or less: now)."""
    return start_ms + window_ms + settle_ms - now_ms


class ReconcileMetrics:
    """The online reconciler's counters, one registry per process (served by scheduler.health.endpoint)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        if registry is None:
            registry = CollectorRegistry()
            ProcessCollector(registry=registry)
        self.registry = r = registry
        self.expected = Counter("scheduler_reconcile_expected", "Expected occurrences reconciled by the online "
                                "reconciler, by what became of them (the classifications of docs/reconcile.md)",
                                ["tenant", "classification"], registry=r)
        self.absent = Counter("scheduler_reconcile_absent", "Expected occurrences with no dispatch and no event "
                              "explaining it, found by the online reconciler", ["tenant"], registry=r)
        self.unexpected = Counter("scheduler_reconcile_unexpected", "Dispatched occurrences no schedule version "
                                  "expects, found by the online reconciler", ["tenant"], registry=r)
        self.window_end = Gauge("scheduler_reconcile_window_end_seconds", "End (epoch seconds, exclusive) of the "
                                "last window the online reconciler finished", ["tenant"], registry=r)
        self.heartbeat = Heartbeat()

    def prime(self, tenant: str) -> None:
        """Every series at 0 from the start, so that rate() and increase() see the first finding."""
        for name in CLASSIFICATIONS:
            self.expected.labels(tenant, name)
        self.absent.labels(tenant)
        self.unexpected.labels(tenant)

    def probes(self, window_ms: int, settle_ms: int) -> tuple[Callable[[], Probe], Callable[[], Probe]]:
        silence_s = max(60.0, 3 * (window_ms + settle_ms) / 1000)
        live = lambda: alive(self.heartbeat.last, time.monotonic(), silence_s)  # noqa: E731
        return live, live


@dataclass(frozen=True)
class FollowOptions:
    tenant: str
    schedule: str | None
    window_ms: int
    settle_ms: int
    batch: int


class Follower:
    """Reconciles window after window on one connection (reopened when lost) until `stop` is set."""

    def __init__(self, connect: Callable[[], psycopg.Connection], prefix: str, options: FollowOptions,
                 metrics: ReconcileMetrics, out: TextIO = sys.stdout) -> None:
        self.connect, self.prefix, self.options, self.metrics, self.out = connect, prefix, options, metrics, out
        self._conn: psycopg.Connection | None = None

    def run(self, start_ms: int, stop: threading.Event, now_ms: Callable[[], int] = lambda: int(time.time() * 1000)
            ) -> None:
        o = self.options
        self.metrics.prime(o.tenant)
        next_start = start_ms
        while not stop.is_set():
            self.metrics.heartbeat.beat()
            wait_ms = due_in_ms(next_start, now_ms(), o.window_ms, o.settle_ms)
            if wait_ms > 0:
                stop.wait(min(wait_ms, 5_000) / 1000)  # wake to beat while a long window closes
                continue
            try:
                self.reconcile_window(next_start, next_start + o.window_ms)
            except psycopg.OperationalError as exc:
                LOG.warning("window %s: the audit database failed (%s); again in %.0f s", next_start,
                            str(exc).strip(), RETRY_S)
                self._close()
                stop.wait(RETRY_S)
                continue
            next_start += o.window_ms
        self._close()

    def reconcile_window(self, from_ms: int, to_ms: int) -> None:
        from scheduler.audit.ledger_reader import LedgerReader
        from scheduler.audit.report_format import iso
        from scheduler.audit.streamed_report import reconcile_streamed

        o, m = self.options, self.metrics
        if self._conn is None or self._conn.closed:
            self._conn = self.connect()
        conn = self._conn
        reader = LedgerReader(conn, self.prefix)
        try:
            report = reconcile_streamed(reader, o.tenant, from_ms, to_ms, o.schedule, o.batch)
            # The counters first: whoever reads an ABSENT line finds it counted already.
            for name, n in report.counts().items():
                if n:
                    m.expected.labels(o.tenant, name).inc(n)
            m.absent.labels(o.tenant).inc(report.absent_count)
            m.unexpected.labels(o.tenant).inc(report.unexpected_count)
            for c in report.absent():
                e = c.expected
                self.out.write(f"{ABSENT} {e.occurrence_id} schedule={e.schedule_id} version={e.schedule_version} "
                               f"scheduled_for={iso(e.scheduled_for_ms)} origin={e.origin}\n")
            for u in report.unexpected():
                self.out.write(f"UNEXPECTED {u.occurrence_id} schedule={u.schedule_id} version={u.schedule_version} "
                               f"scheduled_for={iso(u.scheduled_for_ms)} deliveries={u.deliveries}\n")
            self.out.flush()
        finally:
            conn.rollback()  # nothing to keep: the next window makes its temporary tables anew
        m.window_end.labels(o.tenant).set(to_ms / 1000)
        LOG.info("reconciled [%s, %s): %d expected, %d absent, %d unexpected", iso(from_ms), iso(to_ms),
                 report.expected, report.absent_count, report.unexpected_count)

    def _close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            finally:
                self._conn = None
