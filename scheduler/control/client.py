"""Python client: produces schedule commands and waits for their results.

Commands go to ``<prefix>.commands`` keyed by schedule_id through an idempotent
producer with Java's partitioner; the result is read back from
``<prefix>.command-results`` by command id. What can be checked locally (a bad
cron, an unknown zone) is rejected before anything is sent.
"""
from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, cast

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from scheduler.control.bulk import DEFAULT_WINDOW, CreateRequest, pipelined_creates
from scheduler.control.client_views import ClientViews
from scheduler.control.command_record import command_record, create_record, create_schedule_id
from scheduler.control.errors import (
    CommandTimeout,
    Conflict,
    NotFound,
    QuotaExceeded,
    SchedulerError,
    Unavailable,
    ValidationError,
    VersionConflict,
    accepted,
    error_for,
)
from scheduler.control.specs import (
    SPEC_DEFAULTS,
    dry_run_diff,
    make_spec,
    preview,
    validate_backfill,
    validate_overlap,
    validate_spec,
    with_anchor,
)
from scheduler.kafka.clients import DURABLE_PRODUCER, client_settings, connection
from scheduler.kafka.views import CompactedView, watermarks
from scheduler.wire.codec import Codec
from scheduler.wire.limits import PREVIEW_COUNT
from scheduler.wire.partitioning import PRODUCER_PARTITIONER_CONF
from scheduler.wire.topology import Topology

Record = dict[str, Any]

# The spec helpers and the errors are part of the client's API (`from scheduler.control.client import make_spec`).
__all__ = ["SPEC_DEFAULTS", "CommandTimeout", "Conflict", "NotFound", "QuotaExceeded", "SchedulerClient",
           "SchedulerError", "Unavailable", "ValidationError", "VersionConflict", "dry_run_diff", "error_for",
           "make_spec", "preview", "validate_spec", "with_anchor"]

# librdkafka cannot tell a TLS listener spoken to in plaintext from a dead broker: say what to check.
TRANSPORT_HINT = ("is the broker up, and does the listener expect the client's security.protocol? A SASL_SSL "
                  "listener needs client_config with security.protocol=SASL_SSL, sasl.* and ssl.ca.location")


@dataclass
class SchedulerClient(ClientViews):
    """Thread-safe: any number of threads may call it (the HTTP API does)."""

    bootstrap_servers: str
    prefix: str = "sched"
    timeout_s: float = 30.0
    # librdkafka settings for every Kafka client of this client, e.g. SASL_SSL credentials and CA file.
    client_config: Mapping[str, str] | None = None
    # How long the producer gathers commands into one batch: short for one command waited for, longer for a
    # bulk load (scheduler.control.bulk.BULK_LINGER_MS), where fewer, larger produce requests save broker CPU.
    linger_ms: float = 2.0

    def __post_init__(self) -> None:
        self.codec = Codec.default()
        common = connection(self.bootstrap_servers, self.client_config)
        topology = Topology.load()
        self.commands_topic = topology.topic_name("commands", self.prefix)
        self.results_topic = topology.topic_name("command-results", self.prefix)
        self.producer = Producer(client_settings(common, {**DURABLE_PRODUCER, "linger.ms": self.linger_ms,
                                                          **PRODUCER_PARTITIONER_CONF}))
        self.consumer = Consumer(client_settings(common, {"group.id": f"client-{uuid.uuid4()}",
                                                          "enable.auto.commit": False,
                                                          "isolation.level": "read_committed"}))
        try:
            partitions = self.consumer.list_topics(self.results_topic, timeout=10).topics[self.results_topic].partitions
        except KafkaException as exc:
            self.consumer.close()
            raise Unavailable("UNAVAILABLE", f"cannot reach the cluster: {exc}; {TRANSPORT_HINT}") from exc
        if not partitions:
            self.consumer.close()
            raise Unavailable("UNAVAILABLE", f"topic {self.results_topic} does not exist: "
                              "run `scheduler topics ensure` (or start a scheduler) first")
        # Concrete end offsets, not OFFSET_END: a result produced before the first fetch resolved
        # a logical offset would otherwise be skipped.
        ends = watermarks(self.consumer, self.results_topic, list(partitions))
        self.consumer.assign([TopicPartition(self.results_topic, p, high) for p, (_, high) in ends.items()])
        self._lock = threading.Lock()
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._outstanding: set[str] = set()
        self._command_partitions: int | None = None
        self._results: dict[str, Record] = {}
        self._views: dict[str, CompactedView] = {}
        self._reader = threading.Thread(target=self._read_results, name="client-results", daemon=True)
        self._reader.start()

    def close(self) -> None:
        """Also drops the producer, whose librdkafka threads would otherwise outlive the broker, logging."""
        if not hasattr(self, "producer"):
            return
        self.producer.flush(10)
        del self.producer
        self._stop.set()
        self._reader.join(10)
        self.consumer.close()
        for view in self._views.values():
            view.close()

    def __enter__(self) -> SchedulerClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- commands ---------------------------------------------------------------

    def send(self, command_type: str, schedule_id: str, tenant: str, **fields: Any) -> str:
        """Produce one command without waiting (`command_record` takes the fields); returns its command id."""
        return self.send_command(command_record(command_type, schedule_id, tenant, **fields))

    def send_command(self, command: Record) -> str:
        self.expect([command["command_id"]])
        self.produce_command(self.codec.encode("Command", command), command["schedule_id"].encode())
        return command["command_id"]

    def expect(self, command_ids: Iterable[str]) -> None:
        """Collect the results of these commands when they come (before they are produced)."""
        with self._cond:
            self._outstanding.update(command_ids)

    def produce_command(self, value: bytes, key: bytes, partition: int | None = None) -> None:
        """Onto the commands topic, waiting for room when a bulk load outruns the broker."""
        while True:
            try:
                if partition is None:
                    self.producer.produce(self.commands_topic, value, key)
                else:
                    self.producer.produce(self.commands_topic, value, key, partition=partition)
                break
            except BufferError:  # the local queue is full: let it drain
                self.producer.poll(0.1)
        self.producer.poll(0)

    def flush_commands(self, timeout_s: float) -> None:
        """Wait up to `timeout_s` for the commands produced so far to be delivered."""
        self.producer.flush(timeout_s)

    def command_partitions(self) -> int:
        """How many partitions the commands topic has (asked once), to write a CreateBatch where it belongs."""
        if self._command_partitions is None:
            topics = self.producer.list_topics(self.commands_topic, timeout=self.timeout_s).topics
            self._command_partitions = len(topics[self.commands_topic].partitions)
        return self._command_partitions

    def take_results(self, command_ids: Collection[str], wait_s: float) -> dict[str, Record]:
        """The results of `command_ids` collected so far (waiting up to `wait_s` for one), handed out once."""
        with self._cond:
            found = [cid for cid in self._results if cid in command_ids]
            if not found:
                self._cond.wait(wait_s)
                found = [cid for cid in self._results if cid in command_ids]
            self._outstanding.difference_update(found)
            return {cid: self._results.pop(cid) for cid in found}

    def forget(self, command_ids: Iterable[str]) -> None:
        """Stop collecting results for these commands (given up on)."""
        with self._cond:
            for cid in command_ids:
                self._outstanding.discard(cid)
                self._results.pop(cid, None)

    def wait(self, command_ids: Iterable[str], timeout_s: float | None = None) -> dict[str, Record]:
        """The results of `command_ids`, as the reader thread collects them."""
        wanted = set(command_ids)
        self.producer.flush(timeout_s or self.timeout_s)
        deadline = time.monotonic() + (timeout_s or self.timeout_s)
        with self._cond:
            try:
                while not wanted <= self._results.keys():
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise CommandTimeout(next(iter(wanted - self._results.keys())))
                    self._cond.wait(left)
                return {cid: self._results[cid] for cid in wanted}
            finally:
                self._outstanding -= wanted
                for cid in wanted:
                    self._results.pop(cid, None)

    def _read_results(self) -> None:
        """Keeps only the results of this client's outstanding commands (the topic carries everyone's)."""
        while not self._stop.is_set():
            first = self.consumer.poll(0.1)
            if first is None:
                continue
            with self._cond:
                for msg in [first, *self.consumer.consume(1000, timeout=0)]:
                    value = msg.value()
                    if msg.error() is None and value is not None:
                        result = self.codec.decode("CommandResult", value)
                        if result["command_id"] in self._outstanding:
                            self._results[result["command_id"]] = result
                self._cond.notify_all()

    def _call(self, command_type: str, schedule_id: str, tenant: str, **kwargs: Any) -> Record:
        command_id = self.send(command_type, schedule_id, tenant, **kwargs)
        return accepted(self.wait([command_id])[command_id])

    def create(self, tenant: str, spec: Record, *, schedule_id: str | None = None,
               idempotency_key: str | None = None) -> Record:
        """Without a schedule id, one is derived from the idempotency key, so a retried create is a no-op."""
        schedule_id = self.create_id(tenant, schedule_id, idempotency_key)
        result = self.wait([self.send_create(tenant, schedule_id, spec, idempotency_key)])
        return accepted(next(iter(result.values())))

    create_id = staticmethod(create_schedule_id)

    def send_create(self, tenant: str, schedule_id: str, spec: Record, idempotency_key: str | None) -> str:
        """Produce one CREATE (RATE anchored, spec checked locally) without waiting; returns its command id."""
        return self.send_command(create_record(tenant, schedule_id, spec, idempotency_key))

    def create_many(self, requests: Iterable[CreateRequest], window: int = DEFAULT_WINDOW,
                    timeout_s: float | None = None) -> list[Record]:
        """One result per request, in their order: ACCEPTED or REJECTED with its reason (never raised).

        Up to `window` commands are in flight at once (scheduler.control.bulk); `create_stream` hands the
        results out as they arrive instead, for loads too large to keep every result."""
        results: list[Record | None] = []
        for index, result in pipelined_creates(self, requests, window, timeout_s):
            results.extend([None] * (index + 1 - len(results)))
            results[index] = result
        return cast(list[Record], results)  # pipelined_creates gives every index its one result

    def create_stream(self, requests: Iterable[CreateRequest], window: int = DEFAULT_WINDOW,
                      timeout_s: float | None = None) -> Iterator[tuple[int, Record]]:
        """(index of the request, its result), in the order the results arrive."""
        return pipelined_creates(self, requests, window, timeout_s)

    def update(self, tenant: str, schedule_id: str, spec: Record, expected_version: int | None = None, *,
               dry_run: bool = False, count: int = PREVIEW_COUNT) -> Record:
        """With dry_run nothing is sent: the next `count` fires before and after the change, side by side."""
        spec = with_anchor(spec, int(time.time() * 1000))
        if not dry_run:
            return self._call("UPDATE", schedule_id, tenant, spec=spec, expected_version=expected_version)
        validate_spec(spec)
        current = self.get(tenant, schedule_id)
        if expected_version is not None and expected_version != current["version"]:
            raise VersionConflict("VERSION_CONFLICT", f"expected version {expected_version}, "
                                  f"current version is {current['version']}")
        return dry_run_diff(current, spec, int(time.time() * 1000), count)

    def pause(self, tenant: str, schedule_id: str, expected_version: int | None = None, *,
              note: str | None = None) -> Record:
        """`note` (why, at most wire.limits.MAX_NOTE_LENGTH characters) stays on the schedule until RESUME."""
        return self._call("PAUSE", schedule_id, tenant, expected_version=expected_version, note=note)

    def resume(self, tenant: str, schedule_id: str, expected_version: int | None = None) -> Record:
        return self._call("RESUME", schedule_id, tenant, expected_version=expected_version)

    def cancel(self, tenant: str, schedule_id: str, expected_version: int | None = None) -> Record:
        return self._call("CANCEL", schedule_id, tenant, expected_version=expected_version)

    def trigger_now(self, tenant: str, schedule_id: str, overlap_override: str | None = None) -> Record:
        """Fire one occurrence now (under `overlap_override` instead of the schedule's overlap policy, when
        given); the result's next_fires_ms holds its scheduled_for."""
        validate_overlap(overlap_override)
        return self._call("TRIGGER", schedule_id, tenant, overlap_override=overlap_override)

    def rerun(self, tenant: str, occurrence_id: str, schedule_id: str | None = None) -> Record:
        """Dispatch a finished or dead occurrence again under the same id; its schedule comes from the view."""
        if schedule_id is None:
            schedule_id = self.occurrence(tenant, occurrence_id)["schedule_id"]
        return self._call("RERUN", schedule_id, tenant, occurrence_id=occurrence_id)

    def backfill(self, tenant: str, schedule_id: str, from_ms: int, to_ms: int,
                 overlap_override: str | None = None) -> Record:
        """Replay the fires of [from_ms, to_ms] through the catch-up lane (at most wire.limits.MAX_BACKFILL)."""
        validate_backfill(from_ms, to_ms, int(time.time() * 1000), overlap_override)
        return self._call("BACKFILL", schedule_id, tenant, backfill_from_ms=from_ms, backfill_to_ms=to_ms,
                          overlap_override=overlap_override)

    def preview(self, spec: Record, count: int = PREVIEW_COUNT, after_ms: int | None = None) -> list[int]:
        return preview(spec, count, after_ms)

