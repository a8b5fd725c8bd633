"""A worker's Prometheus metrics and the figures its /healthz and /readyz are decided from.

One registry per worker (tests run several in one interpreter), served with the probes by
`scheduler.health.endpoint` (`scheduler worker --metrics-port`). The loops report to it; nothing
here talks to Kafka.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

from scheduler.health.probes import (
    LOOP_SILENCE_S,
    Heartbeat,
    Probe,
    worker_alive,
    worker_ready,
)

HANDLER_BUCKETS = (0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0)
# What became of an occurrence the worker took: an outcome event's kind, or ALREADY_LOST (a redelivery
# of an attempt the scheduler already recorded LOST: nothing written, the scheduler runs the retry).
ALREADY_LOST = "ALREADY_LOST"


class WorkerMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        if registry is None:
            registry = CollectorRegistry()
            ProcessCollector(registry=registry)
            GCCollector(registry=registry)
            PlatformCollector(registry=registry)
        self.registry = r = registry
        self.handled = Counter(
            "scheduler_worker_occurrences", "Occurrences the worker took, by outcome (SUCCEEDED, FAILED, "
            "SKIPPED_STALE, ALREADY_LOST)", ["outcome"], registry=r)
        self.handler_seconds = Histogram(
            "scheduler_worker_handler_seconds", "Handler run time, by outcome (SUCCEEDED, FAILED)", ["outcome"],
            buckets=HANDLER_BUCKETS, registry=r)
        self.heartbeats = Counter(
            "scheduler_worker_lease_renewals", "HEARTBEAT events written to renew a running attempt's lease, "
            "by result (written, failed: the lease allows two misses)", ["result"], registry=r)
        self.leases_lost = Counter(
            "scheduler_worker_leases_lost", "Attempts whose lease the scheduler declared lost while the "
            "handler ran (it refuses their result and retries them)", registry=r)
        self.consumer_lag = Gauge(
            "scheduler_worker_consumer_lag_records",
            "Records of an assigned occurrence partition not yet read: high watermark less the consumer's "
            "position, refreshed every few seconds (transaction markers count one; consumer-group mode only)",
            ["topic", "partition"], registry=r)
        self.assigned_partitions = Gauge("scheduler_worker_assigned_partitions",
                                         "Occurrence partitions assigned to this worker", registry=r)
        self.heartbeat = Heartbeat()  # the handler loop's, for /healthz
        self.handler_started: float | None = None  # monotonic, while a handler runs
        self.assigned: int | None = 0  # None in share-group mode: records, not partitions, are handed out

    # -- what the loops report --------------------------------------------------------

    def outcome(self, kind: str, handler_s: float | None) -> None:
        self.handled.labels(kind).inc()
        if handler_s is not None:
            self.handler_seconds.labels(kind).observe(handler_s)

    def lag(self, lags: Mapping[tuple[str, int], int]) -> None:
        """The current lag of every assigned partition: series of partitions no longer assigned go."""
        self.consumer_lag.clear()
        for (topic, partition), behind in lags.items():
            self.consumer_lag.labels(topic, str(partition)).set(behind)

    def partitions(self, assigned: Iterable[object]) -> None:
        self.assigned = len(list(assigned))
        self.assigned_partitions.set(self.assigned)

    # -- the probes ------------------------------------------------------------------

    def probes(self, max_handler_s: float) -> tuple[Callable[[], Probe], Callable[[], Probe]]:
        """/healthz: the handler loop turns (or a handler runs, up to `max_handler_s`); /readyz: also assigned."""

        def live() -> Probe:
            return worker_alive(self.heartbeat.last, self.handler_started, time.monotonic(), LOOP_SILENCE_S,
                                max_handler_s)

        def ready() -> Probe:
            return worker_ready(live(), self.assigned)

        return live, ready
