"""The worker: consumes a tenant's occurrence topics and runs a handler per occurrence.

Two ways to receive work: a consumer group (default; scheduler.worker.group) or a Kafka share
group (`share=True`; scheduler.worker.share). Both check the schedule view before side effects
and record every step to `<prefix>.attempts`; neither retries by itself.
"""
from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence

from scheduler.kafka.clients import connection
from scheduler.wire.codec import Codec, RecordCodec
from scheduler.wire.topology import Topology, default_group_id, transactional_id_prefix
from scheduler.worker.attempt import Event, Handler, run_attempt
from scheduler.worker.consuming import WorkerOptions
from scheduler.worker.group import run_group
from scheduler.worker.metrics import ALREADY_LOST, WorkerMetrics
from scheduler.worker.occurrence import AttemptContext, Occurrence
from scheduler.worker.share import run_share
from scheduler.worker.view import ScheduleView
from scheduler.worker.view_follower import ViewFollower
from scheduler.worker.writer import AttemptWriter

log = logging.getLogger(__name__)

DEFAULT_PRIORITIES = ("high", "normal", "low")


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


def default_worker_id() -> str:
    """Host and pid: stable for a process, so its transactional id fences its own zombie on restart."""
    return f"{socket.gethostname()}-{os.getpid()}"


class Worker:
    def __init__(
        self,
        bootstrap: str,
        prefix: str,
        tenant: str,
        handler: Handler,
        *,
        group_id: str | None = None,
        priorities: Sequence[str] = DEFAULT_PRIORITIES,
        worker_id: str | None = None,
        share: bool = False,
        options: WorkerOptions = WorkerOptions(),
        codec: RecordCodec | None = None,
        topology: Topology | None = None,
        clock_ms: Callable[[], int] = wall_clock_ms,
        client_config: Mapping[str, str] | None = None,
        metrics: WorkerMetrics | None = None,
    ) -> None:
        """`client_config`: librdkafka settings for every Kafka client of the worker, e.g. its SASL
        credentials (`scheduler.control.acls.scram_client_config`). The settings its guarantees rest on
        (group, transactions, isolation, offsets) are the worker's own: run() refuses them there.
        `metrics`: where it reports outcomes, lag and its loop's heartbeat (one of its own by default)."""
        self.topology = topology or Topology.load()
        unknown = [p for p in priorities if p not in self.topology.priorities]
        if not priorities or unknown:
            raise ValueError(f"priorities must be among {list(self.topology.priorities)}, got {list(priorities)}")
        self.bootstrap = bootstrap
        self.client_config = connection(bootstrap, client_config)
        self.prefix = prefix
        self.tenant = tenant
        self.handler = handler
        self.share = share
        self.group_id = group_id or default_group_id(prefix, tenant, share)
        # Highest first, whatever order the caller gave.
        self.priorities = tuple(p for p in self.topology.priorities if p in priorities)
        self.worker_id = worker_id or default_worker_id()
        self.options = options
        self.codec = codec or Codec.default()
        self.clock_ms = clock_ms
        self.topics = {self.topology.topic_name("occurrences", prefix, tenant=tenant, priority=p): p
                       for p in self.priorities}
        self.view = ScheduleView()
        self.metrics = metrics if metrics is not None else WorkerMetrics()
        self._stop = threading.Event()
        self._current: AttemptContext | None = None
        self.writer: AttemptWriter | None = None

    def run(self) -> None:
        """Process occurrences until `stop()`; the occurrence in progress then is finished and recorded.

        Raises scheduler.kafka.clients.NotAuthorized as soon as the broker's ACLs refuse the worker a
        topic, group or transactional id: the Kafka client would otherwise wait for access forever."""
        view_topic = self.topology.topic_name("schedule-view", self.prefix, tenant=self.tenant)
        follower = ViewFollower(self.bootstrap, view_topic, self.view, self.codec, self.client_config)
        try:
            follower.catch_up(self.options.view_catch_up_s)
            log.info("worker %s: schedule view has %d schedules; %s %s on %s", self.worker_id, len(self.view),
                     "share group" if self.share else "consumer group", self.group_id, sorted(self.topics))
            self.writer = AttemptWriter(self.client_config, self.topology.topic_name("attempts", self.prefix),
                                        transactional_id_prefix(self.prefix, self.tenant) + self.worker_id,
                                        self.codec)
            log.info("worker %s: attempt writer ready", self.worker_id)
            (run_share if self.share else run_group)(self)
        finally:
            if self.writer is not None:
                self.writer.close()
            follower.close()

    def stop(self) -> None:
        """Ask the worker to finish; safe from a signal handler. The running handler sees ctx.cancelled."""
        self._stop.set()
        current = self._current
        if current is not None:
            current.cancelled.set()

    def stopping(self) -> bool:
        return self._stop.is_set()

    def attempt(self, occurrence: Occurrence) -> Event | None:
        """Run one attempt, writing STARTED and each HEARTBEAT in its own transaction; returns the outcome
        event to record (None: nothing to record, see run_attempt)."""
        assert self.writer is not None, "attempt() runs inside run()"
        writer = self.writer
        ctx = AttemptContext.fresh()
        self._current = ctx
        if self._stop.is_set():
            ctx.cancelled.set()
        metrics = self.metrics

        def record_now(event: Event) -> None:
            """Writes STARTED and HEARTBEATs, noting when the handler starts and how renewals fare."""
            heartbeat = event["kind"] == "HEARTBEAT"
            try:
                writer.write([event])
            except Exception:
                if heartbeat:
                    metrics.heartbeats.labels("failed").inc()
                raise
            if heartbeat:
                metrics.heartbeats.labels("written").inc()
            elif event["kind"] == "STARTED":
                metrics.handler_started = time.monotonic()

        try:
            outcome = run_attempt(occurrence, ctx, self.handler, self.view, self.worker_id, self.clock_ms, record_now)
        finally:
            started, metrics.handler_started = metrics.handler_started, None
            self._current = None
        if outcome is None:
            metrics.outcome(ALREADY_LOST, None)
            return None
        metrics.outcome(str(outcome["kind"]), None if started is None else time.monotonic() - started)
        if ctx.lease_lost.is_set():
            metrics.leases_lost.inc()
        return outcome
