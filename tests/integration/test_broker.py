"""The broker the project runs must honour transactions, compaction and share groups, and its
lifecycle (bad input, stop/start, crash/restart) must behave as the README promises."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    ShareConsumer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourceType

from scheduler.broker.local import BrokerError, LocalBroker, free_port

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


def free_ports() -> list[str]:
    """Both listener flags, each a free port: the controller's default, --port + 1, may be taken."""
    return ["--port", str(free_port()), "--controller-port", str(free_port())]


def create_topic(bootstrap: str, name: str, config: dict[str, str] | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, 1, 1, config=config or {})])[name].result(timeout=30)


def read_to_end(bootstrap: str, topic: str, isolation: str = "read_uncommitted", timeout: float = 30.0) -> list[tuple[bytes | None, bytes | None]]:
    """Every (key, value) in partition 0, read until the position reaches the high watermark.

    Comparing with the high watermark (not just the first end-of-partition event) waits out a commit
    marker that is still being written, so a read_committed reader sees the whole committed log."""
    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": f"{topic}-{isolation}",
        "isolation.level": isolation,
        "enable.partition.eof": True,
        "enable.auto.commit": False,
    })
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    records: list[tuple[bytes | None, bytes | None]] = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            error = message.error()
            if error is None:
                records.append((message.key(), message.value()))
            elif error.code() == KafkaError._PARTITION_EOF:
                _, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10, cached=False)
                if message.offset() >= high:
                    return records
            else:
                raise KafkaException(error)
    finally:
        consumer.close()
    raise AssertionError(f"did not reach the end of {topic} within {timeout}s; read so far: {records}")


def produce(bootstrap: str, topic: str, records: list[tuple[bytes, bytes]]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for key, value in records:
        producer.produce(topic, value, key=key)
    assert producer.flush(30) == 0


def test_read_committed_consumer_sees_only_committed_transactions(kafka_bootstrap: str, unique_prefix: str) -> None:
    topic = f"{unique_prefix}.tx"
    create_topic(kafka_bootstrap, topic)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "transactional.id": f"{unique_prefix}-tx"})
    producer.init_transactions(30)

    producer.begin_transaction()
    for value in (b"aborted-1", b"aborted-2"):
        producer.produce(topic, value, key=b"k")
    producer.flush(30)  # the aborted records reach the log, so only isolation can hide them
    producer.abort_transaction(30)

    producer.begin_transaction()
    for value in (b"committed-1", b"committed-2"):
        producer.produce(topic, value, key=b"k")
    producer.commit_transaction(30)

    committed = [value for _, value in read_to_end(kafka_bootstrap, topic, "read_committed")]
    everything = [value for _, value in read_to_end(kafka_bootstrap, topic, "read_uncommitted")]
    assert committed == [b"committed-1", b"committed-2"]
    assert everything == [b"aborted-1", b"aborted-2", b"committed-1", b"committed-2"]


def test_compacted_topic_keeps_the_last_value_per_key(kafka_bootstrap: str, unique_prefix: str) -> None:
    topic = f"{unique_prefix}.compacted"
    create_topic(kafka_bootstrap, topic, {
        "cleanup.policy": "compact",
        "segment.ms": "100",
        "min.cleanable.dirty.ratio": "0.01",
        "min.compaction.lag.ms": "0",
    })
    keys = [b"a", b"b", b"c"]
    produce(kafka_bootstrap, topic, [(key, b"%s-%d" % (key, version)) for version in range(4) for key in keys])
    time.sleep(0.3)
    # The active segment is never cleaned: a later record rolls the one holding the updates.
    produce(kafka_bootstrap, topic, [(b"roll", b"x")])

    deadline = time.monotonic() + 90
    while True:
        updates = [record for record in read_to_end(kafka_bootstrap, topic) if record[0] in keys]
        if len(updates) == len(keys) or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert updates == [(b"a", b"a-3"), (b"b", b"b-3"), (b"c", b"c-3")]


def test_share_group_consumer_receives_a_record(kafka_bootstrap: str, unique_prefix: str) -> None:
    topic, group = f"{unique_prefix}.queue", f"{unique_prefix}-workers"
    create_topic(kafka_bootstrap, topic)
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    # Share groups start at the latest offset by default; this one must see the record produced below.
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET),
    ])
    admin.incremental_alter_configs([resource])[resource].result(timeout=30)
    produce(kafka_bootstrap, topic, [(b"job", b"run-me")])

    with ShareConsumer({"bootstrap.servers": kafka_bootstrap, "group.id": group}) as consumer:
        consumer.subscribe([topic])
        received: list[bytes | None] = []
        deadline = time.monotonic() + 60
        while not received and time.monotonic() < deadline:
            for message in consumer.poll(1.0):
                if message.error() is not None:
                    raise KafkaException(message.error())
                received.append(message.value())
    assert received == [b"run-me"]


def test_stopped_and_started_broker_keeps_its_topics(local_broker: LocalBroker, unique_prefix: str) -> None:
    topic = f"{unique_prefix}.durable"
    create_topic(local_broker.bootstrap, topic)
    produce(local_broker.bootstrap, topic, [(b"k", b"kept")])

    assert local_broker.stop()
    assert not local_broker.is_running()
    local_broker.start()

    assert read_to_end(local_broker.bootstrap, topic) == [(b"k", b"kept")]


def test_restart_after_a_crash_recovers_the_data(local_broker: LocalBroker, unique_prefix: str) -> None:
    topic = f"{unique_prefix}.crash"
    create_topic(local_broker.bootstrap, topic)
    produce(local_broker.bootstrap, topic, [(b"k", b"survives")])

    assert local_broker.kill()
    assert not local_broker.is_running()
    local_broker.restart()

    assert local_broker.is_running()
    assert read_to_end(local_broker.bootstrap, topic) == [(b"k", b"survives")]


@pytest.fixture
def held_port() -> Iterator[int]:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield holder.getsockname()[1]


def run_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "scheduler", "broker", *args],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout,
    )


def cli_env(tmp_path: Path, **overrides: str) -> dict[str, str]:
    env = {name: value for name, value in os.environ.items() if name != "KAFKA_BOOTSTRAP_SERVERS"}
    env["XDG_STATE_HOME"] = str(tmp_path / "state")
    env.update(overrides)
    return env


def test_port_taken_fails_before_launching_java(tmp_path: Path, held_port: int) -> None:
    broker = LocalBroker(tmp_path / "broker", port=held_port, controller_port=free_port())
    began = time.monotonic()
    with pytest.raises(BrokerError, match=rf"port {held_port} .* already in use.*--port"):
        broker.start()
    assert time.monotonic() - began < 5
    assert not broker.is_running()


def test_cli_port_taken_exits_2_with_advice(tmp_path: Path, held_port: int) -> None:
    result = run_cli("start", "--port", str(held_port), "--data-dir", str(tmp_path / "broker"), env=cli_env(tmp_path))
    assert result.returncode == 2
    assert f"port {held_port}" in result.stderr and "--port" in result.stderr
    assert result.stdout == ""


def test_cli_without_java_exits_2_with_advice(tmp_path: Path) -> None:
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    result = run_cli("start", *free_ports(), "--data-dir", str(tmp_path / "broker"),
                     env=cli_env(tmp_path, PATH=str(empty)))
    assert result.returncode == 2
    assert "`java` was not found on PATH" in result.stderr and "17" in result.stderr


def test_cli_with_old_java_exits_2_with_advice(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake_java = bin_dir / "java"
    fake_java.write_text('#!/bin/sh\necho \'openjdk version "11.0.22" 2024-01-16\' >&2\n')
    fake_java.chmod(0o755)
    result = run_cli("start", *free_ports(), "--data-dir", str(tmp_path / "broker"),
                     env=cli_env(tmp_path, PATH=str(bin_dir)))
    assert result.returncode == 2
    assert "Java 11" in result.stderr and "17 or newer" in result.stderr


def test_cli_without_maven_and_empty_cache_exits_2_with_advice(tmp_path: Path) -> None:
    java = subprocess.run(["sh", "-c", "command -v java"], capture_output=True, text=True).stdout.strip()
    if not java:
        pytest.skip("needs a java on PATH to get past the Java check")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "java").symlink_to(os.path.realpath(java))
    result = run_cli("start", *free_ports(), "--data-dir", str(tmp_path / "broker"),
                     env=cli_env(tmp_path, PATH=str(bin_dir), XDG_CACHE_HOME=str(tmp_path / "cache")))
    assert result.returncode == 2
    assert "`mvn` was not found on PATH" in result.stderr


def test_cli_start_uses_kafka_bootstrap_servers_when_set(tmp_path: Path) -> None:
    result = run_cli("start", "--data-dir", str(tmp_path / "broker"),
                     env=cli_env(tmp_path, KAFKA_BOOTSTRAP_SERVERS="kafka.example:9092"))
    assert result.returncode == 0
    assert result.stdout.strip() == "kafka.example:9092"
    assert not (tmp_path / "broker").exists()


def test_cli_start_status_stop(tmp_path: Path) -> None:
    data_dir = str(tmp_path / "broker")
    port = free_port()
    env = cli_env(tmp_path)
    started = run_cli("start", "--port", str(port), "--controller-port", str(free_port()), "--data-dir", data_dir, env=env)
    try:
        assert started.returncode == 0, started.stderr
        assert started.stdout.strip() == f"127.0.0.1:{port}"
        status = run_cli("status", "--data-dir", data_dir, env=env)
        assert status.returncode == 0 and f"bootstrap=127.0.0.1:{port}" in status.stdout
    finally:
        stopped = run_cli("stop", "--data-dir", data_dir, env=env)
    assert stopped.returncode == 0, stopped.stderr
    assert run_cli("status", "--data-dir", data_dir, env=env).returncode == 3
