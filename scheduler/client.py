"""Python client: produces schedule commands and waits for their results.

Commands go to ``<prefix>.commands`` keyed by schedule_id through an idempotent
producer with Java's partitioner; the result is read back from
``<prefix>.command-results`` by command id. What can be checked locally (a bad
cron, an unknown zone) is rejected before anything is sent.
"""
from __future__ import annotations

import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from confluent_kafka import OFFSET_END, Consumer, Producer, TopicPartition

from scheduler.codec import Codec
from scheduler.engine.specs import compile_spec
from scheduler.partitioning import PRODUCER_PARTITIONER_CONF
from scheduler.timing.spec import SpecError
from scheduler.topology import Topology

Record = dict[str, Any]

SPEC_DEFAULTS: Record = {
    "kind": "CRON", "expression": "", "time_zone": "UTC", "anchor_at_ms": None, "start_at_ms": None,
    "end_at_ms": None, "max_fires": None, "dst_gap": "SKIP", "dst_overlap": "FIRST", "priority": "NORMAL",
    "flexible_window_ms": 0, "misfire_policy": "FIRE_ONCE", "catch_up_limit": 10, "max_lateness_ms": 300_000,
    "overlap_policy": "ALLOW", "payload": b"", "max_attempts": 3, "retry_backoff_ms": 1000,
    "run_timeout_ms": 3_600_000,
}


class SchedulerError(Exception):
    """A command the scheduler rejected; `reason` is its reason code."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason
        self.message = message


class CommandTimeout(SchedulerError):
    def __init__(self, command_id: str) -> None:
        super().__init__("TIMEOUT", f"no result for command {command_id} in time")


def make_spec(kind: str, expression: str, time_zone: str = "UTC", **fields: Any) -> Record:
    """A full ScheduleSpec record; unknown fields are an error, not silently ignored."""
    unknown = set(fields) - set(SPEC_DEFAULTS)
    if unknown:
        raise ValueError(f"unknown spec fields: {sorted(unknown)}")
    return {**SPEC_DEFAULTS, **fields, "kind": kind.upper(), "expression": expression, "time_zone": time_zone}


def validate_spec(spec: Record) -> None:
    try:
        compile_spec(spec)
    except SpecError as exc:
        reason = "UNKNOWN_ZONE" if exc.field == "time_zone" else "INVALID_SPEC"
        raise SchedulerError(reason, f"{exc.field}: {exc.message}") from exc


@dataclass
class SchedulerClient:
    bootstrap_servers: str
    prefix: str = "sched"
    timeout_s: float = 30.0

    def __post_init__(self) -> None:
        self.codec = Codec.default()
        topology = Topology.load()
        self.commands_topic = topology.topic_name("commands", self.prefix)
        self.results_topic = topology.topic_name("command-results", self.prefix)
        self.producer = Producer({"bootstrap.servers": self.bootstrap_servers, "enable.idempotence": True,
                                  "linger.ms": 2, **PRODUCER_PARTITIONER_CONF})
        self.consumer = Consumer({"bootstrap.servers": self.bootstrap_servers,
                                  "group.id": f"client-{uuid.uuid4()}", "enable.auto.commit": False,
                                  "isolation.level": "read_committed"})
        partitions = self.consumer.list_topics(self.results_topic, timeout=10).topics[self.results_topic].partitions
        if not partitions:
            self.consumer.close()
            raise SchedulerError("UNAVAILABLE", f"topic {self.results_topic} does not exist: "
                                 "run `scheduler topics ensure` (or start a scheduler) first")
        self.consumer.assign([TopicPartition(self.results_topic, p, OFFSET_END) for p in partitions])
        self._results: dict[str, Record] = {}

    def close(self) -> None:
        self.producer.flush(10)
        self.consumer.close()

    def __enter__(self) -> "SchedulerClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- commands ---------------------------------------------------------------

    def send(self, command_type: str, schedule_id: str, tenant: str, *, spec: Record | None = None,
             idempotency_key: str | None = None, expected_version: int | None = None) -> str:
        """Produce one command without waiting; returns its command id."""
        if spec is not None:
            validate_spec(spec)
        command_id = str(uuid.uuid4())
        command = {
            "command_id": command_id, "type": command_type, "schedule_id": schedule_id, "tenant": tenant,
            "idempotency_key": idempotency_key, "expected_version": expected_version, "spec": spec,
            "occurrence_id": None, "issued_at_ms": int(time.time() * 1000),
        }
        self.producer.produce(self.commands_topic, self.codec.encode("Command", command), schedule_id.encode())
        self.producer.poll(0)
        return command_id

    def wait(self, command_ids: Iterable[str], timeout_s: float | None = None) -> dict[str, Record]:
        wanted = set(command_ids)
        self.producer.flush(timeout_s or self.timeout_s)
        deadline = time.monotonic() + (timeout_s or self.timeout_s)
        while not wanted <= self._results.keys():
            if time.monotonic() > deadline:
                raise CommandTimeout(next(iter(wanted - self._results.keys())))
            for msg in self.consumer.consume(1000, timeout=0.2):
                if msg.error() is None:
                    result = self.codec.decode("CommandResult", msg.value())
                    self._results[result["command_id"]] = result
        return {cid: self._results.pop(cid) for cid in wanted}

    def _call(self, command_type: str, schedule_id: str, tenant: str, **kwargs: Any) -> Record:
        command_id = self.send(command_type, schedule_id, tenant, **kwargs)
        result = self.wait([command_id])[command_id]
        if result["status"] != "ACCEPTED":
            raise SchedulerError(result["reason"] or "UNKNOWN", result["message"] or "")
        return result

    def create(self, tenant: str, spec: Record, *, schedule_id: str | None = None,
               idempotency_key: str | None = None) -> Record:
        """Without a schedule id, one is derived from the idempotency key, so a retried create is a no-op."""
        if schedule_id is None:
            key = idempotency_key or str(uuid.uuid4())
            schedule_id = str(uuid.uuid5(uuid.NAMESPACE_URL, f"{tenant}/{key}"))
        return self._call("CREATE", schedule_id, tenant, spec=spec, idempotency_key=idempotency_key)

    def update(self, tenant: str, schedule_id: str, spec: Record, expected_version: int | None = None) -> Record:
        return self._call("UPDATE", schedule_id, tenant, spec=spec, expected_version=expected_version)

    def pause(self, tenant: str, schedule_id: str) -> Record:
        return self._call("PAUSE", schedule_id, tenant)

    def resume(self, tenant: str, schedule_id: str) -> Record:
        return self._call("RESUME", schedule_id, tenant)

    def cancel(self, tenant: str, schedule_id: str) -> Record:
        return self._call("CANCEL", schedule_id, tenant)
