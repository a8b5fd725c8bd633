"""Real `scheduler worker` processes, and the records that drive and observe them."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from engine_harness import SchedulerProcess, TopicReader, ensure_layout

from scheduler.control.client import SchedulerClient
from scheduler.control.errors import NotFound
from scheduler.kafka.admin import ensure_topics
from scheduler.wire.codec import Codec
from scheduler.wire.partitioning import PRODUCER_PARTITIONER_CONF
from scheduler.wire.topology import Topology

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
CODEC = Codec.default()
TOPOLOGY = Topology.load()
SCHEDULED_FOR_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def create_layout(bootstrap: str, prefix: str, tenant: str) -> None:
    report = ensure_topics(bootstrap, TOPOLOGY, prefix, tenants=[tenant])
    assert report.clean, report.differences


def occurrence(schedule_id: str, tenant: str, *, version: int = 1, attempt: int = 1, priority: str = "NORMAL",
               payload: bytes = b"", minute: int = 0) -> dict[str, Any]:
    scheduled_for_ms = SCHEDULED_FOR_MS + minute * 60_000
    return {
        "occurrence_id": f"{schedule_id}/v{version}/{scheduled_for_ms}",
        "schedule_id": schedule_id, "tenant": tenant, "schedule_version": version,
        "scheduled_for_ms": scheduled_for_ms, "available_at_ms": scheduled_for_ms,
        "priority": priority, "payload": payload, "attempt": attempt, "dst_rule": None, "catch_up": False,
    }


def schedule_state(schedule_id: str, tenant: str, version: int, state: str) -> dict[str, Any]:
    return {
        "schedule_id": schedule_id, "tenant": tenant, "version": version, "state": state,
        "spec": {"kind": "RATE", "expression": "every 1m"}, "create_command_id": f"create-{schedule_id}",
        "created_at_ms": SCHEDULED_FOR_MS, "updated_at_ms": SCHEDULED_FOR_MS, "fired_count": 0,
    }


def produce(bootstrap: str, records: list[tuple[str, str, bytes]]) -> None:
    """(topic, key, value) triples, keyed like the scheduler keys them (murmur2 on schedule_id)."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, **PRODUCER_PARTITIONER_CONF})
    for topic, key, value in records:
        producer.produce(topic, value, key=key.encode())
    assert producer.flush(30) == 0


def enqueue(bootstrap: str, prefix: str, occurrences: list[dict[str, Any]]) -> None:
    produce(bootstrap, [
        (TOPOLOGY.topic_name("occurrences", prefix, tenant=o["tenant"], priority=o["priority"].lower()),
         o["schedule_id"], CODEC.encode("Occurrence", o))
        for o in occurrences
    ])


def publish_states(bootstrap: str, prefix: str, states: list[dict[str, Any]]) -> None:
    produce(bootstrap, [
        (TOPOLOGY.topic_name("schedule-view", prefix, tenant=s["tenant"]), s["schedule_id"],
         CODEC.encode("ScheduleState", s))
        for s in states
    ])


def attempt_reader(bootstrap: str, prefix: str) -> TopicReader:
    return TopicReader(bootstrap, [TOPOLOGY.topic_name("attempts", prefix)], "AttemptEvent")


def kinds_by_occurrence(reader: TopicReader) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for item in sorted(reader.received, key=lambda r: r.record["at_ms"]):
        out.setdefault(item.record["occurrence_id"], []).append(item.record["kind"])
    return out


def status_of(client: Any, tenant: str, occurrence_id: str) -> dict[str, Any]:
    """The occurrence's status, or {} before the engine has read its first attempt event: a worker notes
    its start before that event is even sent (docs/control-plane.md, the occurrence view)."""
    try:
        return client.occurrence(tenant, occurrence_id)
    except NotFound:
        return {}


@dataclass
class WorkerProcess:
    """`scheduler worker` as a child process, so a test can SIGTERM or SIGKILL it for real."""

    bootstrap: str
    prefix: str
    tenant: str
    handler: str
    workdir: Path
    extra_args: tuple[str, ...] = ()
    env: dict[str, str] | None = None
    proc: subprocess.Popen | None = None

    def start(self) -> WorkerProcess:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.log_path = self.workdir / f"worker-{uuid.uuid4().hex[:6]}.log"
        env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": self.bootstrap, "SCHEDULER_TOPIC_PREFIX": self.prefix,
               "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
               "WORKER_TEST_DIR": str(self.workdir), **(self.env or {})}
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "scheduler", "worker", "--tenant", self.tenant, "--handler", self.handler,
                 "--session-timeout-ms", "6000", *self.extra_args],
                cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
        return self

    def terminate(self, timeout: float = 30) -> int:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop_quietly(self) -> None:
        """Kill it if still running and print its log's tail, which pytest shows only for a failed test."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        print(f"--- {self.log_path.name} (exit {self.proc.returncode}):\n{self.log_tail()}")

    def log_tail(self, lines: int = 30) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])


def handled(workdir: Path) -> list[dict[str, Any]]:
    """What the test handlers wrote (one JSON line per call), in call order."""
    path = workdir / "handled.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def attempt_partitions(bootstrap: str, prefix: str, expected: int, timeout: float = 30) -> list[tuple[str, int]]:
    """(key, partition) of the first `expected` committed attempt events."""
    topic = TOPOLOGY.topic_name("attempts", prefix)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{prefix}-partitions",
                         "isolation.level": "read_committed"})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(TOPOLOGY.schedule_partitions)])
    seen: list[tuple[str, int]] = []
    deadline = time.monotonic() + timeout
    try:
        while len(seen) < expected and time.monotonic() < deadline:
            seen.extend((m.key().decode(), m.partition()) for m in consumer.consume(100, 0.3) if m.error() is None)
    finally:
        consumer.close()
    return seen


StartWorker = Callable[..., WorkerProcess]


@contextmanager
def scheduler_with_workers(bootstrap: str, prefix: str, tmp_path: Path,
                           tenant: str) -> Iterator[tuple[SchedulerClient, StartWorker, Path]]:
    """One scheduler process, a client, and `start(handler, *worker_args)` for worker processes sharing a
    work dir; all stopped on exit (the workers' log tails printed, for a failed test's report)."""
    ensure_layout(bootstrap, prefix, [tenant])
    scheduler = SchedulerProcess(bootstrap, prefix, tmp_path / "state", "a", ("--horizon", "3")).start()
    client = SchedulerClient(bootstrap, prefix, timeout_s=60)
    workers: list[WorkerProcess] = []

    def start(handler: str, *extra: str) -> WorkerProcess:
        started = WorkerProcess(bootstrap, prefix, tenant, f"worker_handlers:{handler}", tmp_path / "work",
                                extra_args=extra).start()
        workers.append(started)
        return started

    try:
        yield client, start, tmp_path / "work"
    finally:
        for started in workers:
            started.stop_quietly()
        client.close()
        if scheduler.alive():
            scheduler.terminate()
