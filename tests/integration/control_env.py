"""A running scheduler, registered tenants and the control plane over them, for the control-plane tests."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition
from engine_harness import REPO, TOPOLOGY, SchedulerProcess, TopicReader, ensure_layout, occurrence_topics

from conftest import delete_topics
from scheduler.api.app import create_app
from scheduler.api.keys import KeyStore, create_key
from scheduler.api.plane import ControlPlane
from scheduler.control.client import make_spec

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


def cli(env: ControlEnv, *args: str, prefix: str | None = None) -> tuple[int, object]:
    """`scheduler ARGS --json` against the env's broker and prefix: exit code and parsed stdout."""
    run = subprocess.run([sys.executable, "-m", "scheduler", *args, "--json"], cwd=REPO, capture_output=True,
                         text=True, timeout=120,
                         env={**os.environ, "KAFKA_BOOTSTRAP_SERVERS": env.bootstrap,
                              "SCHEDULER_TOPIC_PREFIX": prefix or env.prefix})
    return run.returncode, json.loads(run.stdout) if run.stdout.strip() else None
