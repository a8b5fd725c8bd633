"""A confluent-kafka producer with PRODUCER_PARTITIONER_CONF lands each key where Java's producer would."""
from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, Message, Producer

from scheduler.kafka.admin import ensure_topics
from scheduler.wire.partitioning import PRODUCER_PARTITIONER_CONF, partition_for
from scheduler.wire.topology import Topology

pytestmark = pytest.mark.integration

KEYS = (
    [f"schedule-{i}".encode() for i in range(300)]
    + [f"{i:08x}-4e1f-9c2a-{i * 7919:012x}".encode() for i in range(100)]
    + ["räksmörgås".encode(), "定期実行".encode(), b"\x00\xff\x80\x7f"]
)


def produced_partitions(bootstrap: str, topic: str, conf: dict[str, str]) -> dict[bytes, int]:
    """The partition the broker acknowledged for each key."""
    acked: dict[bytes, int] = {}
    errors: list[KafkaError] = []

    def on_delivery(error: KafkaError | None, message: Message) -> None:
        if error is not None:
            errors.append(error)
        else:
            acked[message.key()] = message.partition()

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **conf})
    for key in KEYS:
        producer.produce(topic, key=key, value=b"v", on_delivery=on_delivery)
    assert producer.flush(30) == 0
    assert errors == []
    return acked


def test_murmur2_random_producer_matches_partition_for(
    kafka_bootstrap: str, unique_prefix: str
) -> None:
    topology = Topology.load()
    ensure_topics(kafka_bootstrap, topology, unique_prefix)
    topic = topology.topic_name("commands", unique_prefix)
    n = topology.schedule_partitions

    acked = produced_partitions(kafka_bootstrap, topic, PRODUCER_PARTITIONER_CONF)

    assert len(acked) == len(KEYS)
    mismatches = {key: (p, partition_for(key, n)) for key, p in acked.items() if p != partition_for(key, n)}
    assert mismatches == {}
    assert set(acked.values()) == set(range(n))


def test_librdkafka_default_partitioner_would_break_co_partitioning(
    kafka_bootstrap: str, unique_prefix: str
) -> None:
    """Why the setting exists: librdkafka's default (CRC32-based) disagrees with Java for many keys."""
    topology = Topology.load()
    ensure_topics(kafka_bootstrap, topology, unique_prefix)
    topic = topology.topic_name("commands", unique_prefix)
    n = topology.schedule_partitions

    acked = produced_partitions(kafka_bootstrap, topic, {})

    disagreeing = [key for key, p in acked.items() if p != partition_for(key, n)]
    assert len(disagreeing) > len(KEYS) // 2
