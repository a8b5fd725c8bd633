"""Real scheduler processes and real consumers for the engine's integration tests."""
from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from prometheus_client.parser import text_string_to_metric_families

from helpers.waiting import wait_until
from scheduler.broker.local import free_port
from scheduler.control.client import SchedulerClient, make_spec
from scheduler.kafka.admin import ensure_tenant_topics, ensure_topics
from scheduler.timing.occurrence_id import occurrence_id
from scheduler.wire.codec import Codec
from scheduler.wire.partitioning import PRODUCER_PARTITIONER_CONF
from scheduler.wire.topology import Topology

REPO = Path(__file__).resolve().parents[2]
CODEC = Codec.default()
TOPOLOGY = Topology.load()
# Staged bursts (docs/decisions/0002-staged-bursts.md) at test size: `create_burst` makes 1,450 stageable entries.
BURST_TENANTS = ["big", "small1", "small2", "guarded"]
STAGE_ARGS = ("--stage-min", "500")
# A first guess of 500 produced/s makes the produce window of 1,450 records about 4 s (not 0.5): long enough for a
# test to act while the stage's transaction is open (a stage is in memory only until its produce window).
OPEN_STAGE_ARGS = (*STAGE_ARGS, "--stage-produce-rate", "500")
PRODUCED = "produced the stage due at"


@dataclass
class SchedulerProcess:
    """`scheduler run` in a child process, so tests can SIGKILL it for real."""

    bootstrap: str
    prefix: str
    state_dir: Path
    instance_id: str
    extra_args: tuple[str, ...] = ()
    log_path: Path | None = None
    proc: subprocess.Popen | None = None
    # Engine tests name tenants freely and rely on the engine's default quotas (unlimited running slots,
    # so bursts are staged): they run with --open-tenants. Tests that register their tenants run strict.
    open_tenants: bool = True
    # Ownership and readiness are read from the process's /metrics and /readyz, never from its log text: every
    # process serves them, on the port its `--metrics-port` names or on a free one.
    metrics_port: int = 0

    def start(self) -> SchedulerProcess:
        env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": self.bootstrap, "SCHEDULER_TOPIC_PREFIX": self.prefix}
        self.log_path = self.state_dir.parent / f"{self.instance_id}.log"
        log = open(self.log_path, "ab")
        args = list(self.extra_args)
        if "--metrics-port" in args:
            self.metrics_port = int(args[args.index("--metrics-port") + 1])
        else:
            self.metrics_port = free_port()
            args += ["--metrics-port", str(self.metrics_port)]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "scheduler", "run", "--instance-id", self.instance_id,
             "--state-dir", str(self.state_dir), *(("--open-tenants",) if self.open_tenants else ()), *args],
            cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
        return self

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def terminate(self, timeout: float = 30) -> int:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def owned_partitions(self) -> set[int]:
        """The partitions this process owns now (restoring ones included), per its `scheduler_partition_owned`
        gauge; none while its endpoint is not up yet."""
        return self.partitions_marked("scheduler_partition_owned")

    def standby_partitions(self) -> set[int]:
        """The partitions this process keeps warm copies of now, per its `scheduler_standby_copy` gauge."""
        return self.partitions_marked("scheduler_standby_copy")

    def partitions_marked(self, gauge: str) -> set[int]:
        """The `partition` labels whose series of `gauge` is 1; none while the endpoint is not up yet."""
        try:
            samples = scrape(self.metrics_port)
        except OSError:
            return set()
        return {int(dict(labels)["partition"]) for (name, labels), value in samples.items()
                if name == gauge and value == 1}

    def revoked_count(self) -> int:
        """How many partitions were revoked from this process so far (`scheduler_partition_ownership_changes`)."""
        samples = scrape(self.metrics_port)
        return int(samples.get(("scheduler_partition_ownership_changes_total", (("change", "revoked"),)), 0))

    def ready(self) -> bool:
        """`/readyz` answers 200: the process owns partitions and every one of them dispatches (none restoring)."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/readyz", timeout=5) as response:
                return bool(response.status == 200)
        except OSError:  # not serving yet, or 503 (urllib's HTTPError is an OSError)
            return False

    def log_tail(self, lines: int = 40) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])


def wait_for_log(process: SchedulerProcess, text: str, until_s: float) -> None:
    while text not in process.log_tail(400):
        assert time.time() < until_s, f"never logged {text!r}:\n{process.log_tail()}"
        assert process.alive(), process.log_tail()
        time.sleep(0.05)


def wait_until_ready(process: SchedulerProcess, timeout: float) -> None:
    """Until the process owns partitions and dispatches for every one of them (its /readyz)."""
    def ready() -> bool:
        assert process.alive(), process.log_tail()
        return process.ready()

    wait_until(ready, timeout, lambda: f"{process.instance_id} to be ready:\n{process.log_tail()}", interval=0.2)


def wait_for_split(processes: list[SchedulerProcess], partitions: int, timeout: float = 60) -> None:
    """Until the processes own every partition between them, each at least one."""
    def split() -> bool:
        owned = [p.owned_partitions() for p in processes]
        return all(owned) and set().union(*owned) == set(range(partitions)) and sum(map(len, owned)) == partitions

    wait_until(split, timeout, lambda: "the partitions split between the processes:\n"
               + "\n".join(p.log_tail(10) for p in processes), interval=0.5)


def ensure_layout(bootstrap: str, prefix: str, tenants: Iterable[str] = ()) -> None:
    ensure_topics(bootstrap, TOPOLOGY, prefix)
    for tenant in tenants:
        ensure_tenant_topics(bootstrap, TOPOLOGY, prefix, tenant)


def rfc3339(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).isoformat().replace("+00:00", "Z")


def create_burst(bootstrap: str, prefix: str, due_ms: int) -> dict[str, str]:
    """1,500 one-shots due at `due_ms`; the `guarded` tenant's have an overlap policy (never staged)."""
    owners = ["big"] * 1200 + ["small1"] * 150 + ["small2"] * 100 + ["guarded"] * 50
    expected: dict[str, str] = {}
    with SchedulerClient(bootstrap, prefix, timeout_s=120) as client:
        ids = []
        for n, tenant in enumerate(owners):
            sid = f"st-{n:05d}"
            spec = make_spec("once", rfc3339(due_ms),
                             overlap_policy="QUEUE_ONE" if tenant == "guarded" else "ALLOW")
            ids.append(client.send("CREATE", sid, tenant, spec=spec))
            expected[occurrence_id(sid, 1, datetime.fromtimestamp(due_ms / 1000, tz=timezone.utc))] = tenant
        results = client.wait(ids, timeout_s=120)
    assert {r["status"] for r in results.values()} == {"ACCEPTED"}
    assert time.time() * 1000 < due_ms - 5000, "creating the schedules took longer than the lead time"
    return expected


@dataclass
class Received:
    record: dict[str, Any]
    topic: str
    timestamp_ms: int
    seen_ms: int
    partition: int
    key: bytes | None = None


@dataclass
class TopicReader:
    """A consumer over whole topics, from the beginning (read_committed unless told otherwise)."""

    bootstrap: str
    topics: list[str]
    schema: str
    isolation: str = "read_committed"
    received: list[Received] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": f"reader-{uuid.uuid4()}",
                                  "enable.auto.commit": False, "isolation.level": self.isolation,
                                  "auto.offset.reset": "earliest", "topic.metadata.refresh.interval.ms": 1000})
        assignment = []
        metadata = self.consumer.list_topics(timeout=10).topics
        for topic in self.topics:
            for partition in metadata[topic].partitions:
                assignment.append(TopicPartition(topic, partition, 0))
        self.consumer.assign(assignment)

    def poll(self, seconds: float) -> list[Received]:
        deadline = time.monotonic() + seconds
        fresh: list[Received] = []
        while time.monotonic() < deadline:
            for msg in self.consumer.consume(5000, timeout=0.2):
                if msg.error():
                    continue
                item = Received(CODEC.decode(self.schema, msg.value()), msg.topic(), msg.timestamp()[1],
                                int(time.time() * 1000), msg.partition(), msg.key())
                fresh.append(item)
        self.received.extend(fresh)
        return fresh

    def until(self, done: Callable[[list[Received]], bool], timeout: float) -> list[Received]:
        deadline = time.monotonic() + timeout
        while not done(self.received) and time.monotonic() < deadline:
            self.poll(0.5)
        return self.received

    def close(self) -> None:
        self.consumer.close()


def read_until_all(reader: TopicReader, expected: Iterable[str], until_ms: int) -> Counter[str]:
    """Everything the reader gets until every expected id has come or `until_ms` has passed, plus 2 s for any
    forbidden or duplicate occurrence to show; returns how often each occurrence id came."""
    wanted = set(expected)
    reader.until(lambda got: {r.record["occurrence_id"] for r in got} >= wanted,
                 timeout=max(0.0, until_ms / 1000 - time.time()))
    reader.poll(2.0)
    return Counter(r.record["occurrence_id"] for r in reader.received)


def occurrence_topics(prefix: str, tenants: Iterable[str]) -> list[str]:
    return [TOPOLOGY.topic_name("occurrences", prefix, tenant=t, priority=p)
            for t in tenants for p in TOPOLOGY.priorities]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class FakeWorker:
    """Writes attempt events the way a worker does, one token per attempt."""

    def __init__(self, bootstrap: str, prefix: str) -> None:
        self.topic = TOPOLOGY.topic_name("attempts", prefix)
        self.producer = Producer({"bootstrap.servers": bootstrap, **PRODUCER_PARTITIONER_CONF})

    def send(self, occurrence: dict, kind: str, token: str, **fields) -> None:
        event = {"occurrence_id": occurrence["occurrence_id"], "schedule_id": occurrence["schedule_id"],
                 "tenant": occurrence["tenant"], "schedule_version": occurrence["schedule_version"],
                 "scheduled_for_ms": occurrence["scheduled_for_ms"], "attempt": occurrence["attempt"],
                 "attempt_token": token, "kind": kind, "retryable": False, "error_class": None,
                 "error_message": None, "worker_id": "fake", "at_ms": int(time.time() * 1000), **fields}
        self.producer.produce(self.topic, CODEC.encode("AttemptEvent", event), occurrence["schedule_id"].encode())
        self.producer.flush(10)

    def run(self, occurrence: dict, outcome: str, **fields) -> str:
        token = str(uuid.uuid4())
        self.send(occurrence, "STARTED", token)
        self.send(occurrence, outcome, token, **fields)
        return token


def soon(seconds: float = 2) -> str:
    """An RFC 3339 instant on a whole second at least `seconds` from now, for one-shot schedules."""
    instant = datetime.fromtimestamp(math.ceil(time.time() + seconds), tz=timezone.utc)
    return instant.isoformat().replace("+00:00", "Z")


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """A scheduler process's Prometheus samples (`--metrics-port`), by name and sorted labels."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}
