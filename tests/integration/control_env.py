"""A running scheduler, registered tenants and the control plane over them, for the control-plane tests."""
from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition

from conftest import delete_topics
from engine_harness import CODEC, TOPOLOGY, SchedulerProcess, TopicReader, ensure_layout, occurrence_topics
from scheduler.api.app import create_app
from scheduler.api.keys import KeyStore, create_key
from scheduler.api.plane import ControlPlane
from scheduler.control.client import make_spec
from scheduler.wire.partitioning import PRODUCER_PARTITIONER_CONF

TENANTS = ("acme", "globex")


@dataclass
class ControlEnv:
    bootstrap: str
    prefix: str
    process: SchedulerProcess
    plane: ControlPlane
    key_file: Path
    keys: dict[str, str]  # tenant (or "admin") -> API key

    def app(self):
        return create_app(self.plane, KeyStore(self.key_file))

    def commands_end(self) -> int:
        """Sum of the commands topic's end offsets: unchanged means nothing was sent."""
        topic = TOPOLOGY.topic_name("commands", self.prefix)
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": f"probe-{uuid.uuid4()}"})
        try:
            partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
            return sum(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in partitions)
        finally:
            consumer.close()

    def occurrences(self, tenants: tuple[str, ...] = TENANTS) -> TopicReader:
        return TopicReader(self.bootstrap, occurrence_topics(self.prefix, tenants), "Occurrence")


def control_env(bootstrap: str, tmp_path: Path, extra_args: tuple[str, ...] = ()) -> Iterator[ControlEnv]:
    prefix = f"c{uuid.uuid4().hex[:8]}"
    ensure_layout(bootstrap, prefix)
    process = SchedulerProcess(bootstrap, prefix, tmp_path / "state", "ctl", ("--horizon", "5", *extra_args),
                               open_tenants=False).start()
    plane = ControlPlane.open(bootstrap, prefix, timeout_s=60)
    key_file = tmp_path / "keys.json"
    keys = {"admin": create_key(key_file, None)}
    for tenant in TENANTS:
        plane.tenants.register(tenant)
        keys[tenant] = create_key(key_file, tenant)
    try:
        yield ControlEnv(bootstrap, prefix, process, plane, key_file, keys)
    finally:
        plane.close()
        if process.alive():
            process.terminate()
        delete_topics(bootstrap, prefix)


def hourly(**fields) -> dict:
    return make_spec("cron", "0 * * * *", "Europe/Paris", **fields)


class FakeWorker:
    """Reports attempt events as a worker does (one token per attempt)."""

    def __init__(self, bootstrap: str, prefix: str) -> None:
        self.topic = TOPOLOGY.topic_name("attempts", prefix)
        self.producer = Producer({"bootstrap.servers": bootstrap, **PRODUCER_PARTITIONER_CONF})

    def run(self, occurrence: dict, outcome: str) -> None:
        token = str(uuid.uuid4())
        for kind in ("STARTED", outcome):
            event = {"occurrence_id": occurrence["occurrence_id"], "schedule_id": occurrence["schedule_id"],
                     "tenant": occurrence["tenant"], "schedule_version": occurrence["schedule_version"],
                     "scheduled_for_ms": occurrence["scheduled_for_ms"], "attempt": occurrence["attempt"],
                     "attempt_token": token, "kind": kind, "retryable": False, "error_class": None,
                     "error_message": None, "worker_id": "fake", "at_ms": int(time.time() * 1000)}
            self.producer.produce(self.topic, CODEC.encode("AttemptEvent", event), occurrence["schedule_id"].encode())
        self.producer.flush(10)
