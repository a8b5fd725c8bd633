"""The one transactional producer of the engine and the worker, on the real broker (scheduler.kafka.transactional)."""
from __future__ import annotations

import uuid

import pytest
from confluent_kafka import KafkaException
from engine_harness import TOPOLOGY, TopicReader, ensure_layout

from scheduler.kafka.transactional import TransactionalProducer, is_fenced


def producer(bootstrap: str, transactional_id: str, settle: bool = False) -> TransactionalProducer:
    return TransactionalProducer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id,
                                  "transaction.timeout.ms": 10_000}, init_timeout_s=30, settle=settle)


@pytest.fixture
def topic(kafka_bootstrap: str, unique_prefix: str) -> str:
    ensure_layout(kafka_bootstrap, unique_prefix)
    return TOPOLOGY.topic_name("occurrence-events", unique_prefix)


def read_values(bootstrap: str, topic: str, expected: int) -> list[bytes]:
    reader = TopicReader(bootstrap, [topic], "OccurrenceEvent")
    values: list[bytes] = []
    try:
        deadline_polls = 40
        while len(values) < expected and deadline_polls:
            deadline_polls -= 1
            for msg in reader.consumer.consume(100, timeout=0.25):
                if not msg.error():
                    values.append(msg.value())
    finally:
        reader.close()
    return values


def test_committed_records_are_seen_aborted_ones_never(kafka_bootstrap: str, topic: str) -> None:
    txn = producer(kafka_bootstrap, f"tp-{uuid.uuid4()}")
    delivered: list[int] = []
    txn.begin()
    txn.produce(topic, b"aborted", b"k", partition=0)
    txn.flush(10)
    txn.abort(10)
    txn.begin()
    txn.produce(topic, b"committed", b"k", partition=0, on_delivered=lambda msg: delivered.append(msg.offset()))
    txn.flush(10)
    txn.commit(10, deadline_s=30)
    assert delivered, "the delivery callback heard of the record"
    assert read_values(kafka_bootstrap, topic, 1) == [b"committed"]


@pytest.mark.parametrize("settle", [False, True], ids=["fresh", "settled like a stage producer"])
def test_a_failed_delivery_is_latched_and_fails_the_transaction(kafka_bootstrap: str, topic: str,
                                                                settle: bool) -> None:
    """Settled or not, a record for a partition that does not exist fails its delivery, not its `produce`."""
    txn = producer(kafka_bootstrap, f"tp-{uuid.uuid4()}", settle)
    txn.begin()
    txn.produce(topic, b"nowhere", b"k", partition=999, on_delivered=lambda msg: None)
    with pytest.raises(KafkaException) as raised:
        txn.flush(10)
    assert raised.value.args[0].txn_requires_abort() and txn.failures
    txn.abort(10)
    txn.begin()  # usable again after the abort
    txn.produce(topic, b"after", b"k", partition=0)
    txn.flush(10)
    txn.commit(10, deadline_s=30)
    assert read_values(kafka_bootstrap, topic, 1) == [b"after"]


def test_a_fenced_producer_is_not_replaced_behind_its_new_owners_back(kafka_bootstrap: str, topic: str) -> None:
    shared_id = f"tp-{uuid.uuid4()}"
    old = producer(kafka_bootstrap, shared_id)
    old.begin()
    old.produce(topic, b"old", b"k", partition=0)
    old.flush(10)
    new = producer(kafka_bootstrap, shared_id)  # fences `old` and aborts what it left open
    with pytest.raises(KafkaException) as raised:
        old.abort(10)
    assert is_fenced(raised.value.args[0]), raised.value.args[0]
    new.begin()
    new.produce(topic, b"new", b"k", partition=0)
    new.flush(10)
    new.commit(10, deadline_s=30)  # still the owner: the old one did not fence it back
    assert read_values(kafka_bootstrap, topic, 1) == [b"new"]
