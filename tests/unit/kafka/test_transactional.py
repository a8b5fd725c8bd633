"""TransactionalProducer's bound on send_offsets (issue 28): librdkafka's call can ignore its timeout while
the group's coordinator is down, so a call that does not return is left behind with its producer, a
successor with the same transactional id takes over, and the turn fails abortably."""
from __future__ import annotations

import threading
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from scheduler.kafka import transactional
from scheduler.kafka.transactional import TransactionalProducer


class FakeProducer:
    """A librdkafka producer's transactional calls, recorded; the first instance's send_offsets blocks
    until `release` is set when `stuck_first` is, as the coordinator-less librdkafka call does."""

    made: list[FakeProducer] = []
    stuck_first = False
    send_error: KafkaException | None = None
    init_errors: list[KafkaException] = []
    release = threading.Event()

    def __init__(self, conf: dict[str, Any]) -> None:
        self.conf = conf
        self.calls: list[str] = []
        FakeProducer.made.append(self)

    def init_transactions(self, timeout: float) -> None:
        if FakeProducer.init_errors and len(FakeProducer.made) > 1:
            raise FakeProducer.init_errors.pop(0)
        self.calls.append("init")

    def begin_transaction(self) -> None:
        self.calls.append("begin")

    def send_offsets_to_transaction(self, offsets: list[Any], group_metadata: Any, timeout: float) -> None:
        self.calls.append("send_offsets")
        if FakeProducer.stuck_first and self is FakeProducer.made[0]:
            FakeProducer.release.wait()
            raise KafkaException(KafkaError(KafkaError._FENCED, "fenced by the successor"))
        if FakeProducer.send_error is not None:
            raise FakeProducer.send_error

    def commit_transaction(self, timeout: float) -> None:
        self.calls.append("commit")

    def abort_transaction(self, timeout: float) -> None:
        self.calls.append("abort")

    def purge(self) -> None:
        self.calls.append("purge")


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> type[FakeProducer]:
    FakeProducer.made = []
    FakeProducer.stuck_first = False
    FakeProducer.send_error = None
    FakeProducer.init_errors = []
    FakeProducer.release = threading.Event()
    monkeypatch.setattr(transactional, "Producer", FakeProducer)
    monkeypatch.setattr(transactional, "SEND_OFFSETS_GRACE_S", 0.05)
    yield FakeProducer
    FakeProducer.release.set()


def producer() -> TransactionalProducer:
    return TransactionalProducer({"bootstrap.servers": "unused:1", "transactional.id": "sched-engine-a"})


def test_offsets_sent_in_time_go_into_the_transaction_on_the_same_producer(fake: type[FakeProducer]) -> None:
    txn = producer()
    txn.begin()
    txn.send_offsets([], object(), 0.5)
    txn.commit(1, 1)
    assert len(fake.made) == 1 and fake.made[0].calls == ["init", "begin", "send_offsets", "commit"]
    txn.abort(1)  # after the commit no transaction is open: nothing to abort
    assert "abort" not in fake.made[0].calls


def test_a_stuck_send_offsets_is_replaced_by_a_fencing_successor_and_fails_abortably(fake: type[FakeProducer]) -> None:
    fake.stuck_first = True
    txn = producer()
    stuck = txn.raw
    txn.begin()
    with pytest.raises(KafkaException) as raised:
        txn.send_offsets([], object(), 0.1)
    error = raised.value.args[0]
    assert error.code() == KafkaError._TIMED_OUT and error.txn_requires_abort()
    assert len(fake.made) == 2 and txn.raw is fake.made[1] and txn.raw is not stuck
    assert fake.made[1].calls == ["init"], "the successor's init is what fences the stuck epoch"
    assert [raw for raw, _ in txn.stuck] == [stuck], "the stuck producer stays referenced while its call runs"
    txn.abort(1)  # the turn's abort: the successor has no transaction open
    assert fake.made[1].calls == ["init"] and "abort" not in stuck.calls
    # The next turn runs on the successor; the stuck call's late (fenced) answer changes nothing.
    fake.release.set()
    txn.begin()
    txn.send_offsets([], object(), 0.5)
    txn.commit(1, 1)
    assert fake.made[1].calls == ["init", "begin", "send_offsets", "commit"] and txn.raw is fake.made[1]


def test_a_successor_that_fails_to_init_is_tried_again(fake: type[FakeProducer]) -> None:
    fake.stuck_first = True
    fake.init_errors = [KafkaException(KafkaError(KafkaError._TIMED_OUT, "coordinator not available"))]
    txn = producer()
    txn.begin()
    with pytest.raises(KafkaException) as raised:
        txn.send_offsets([], object(), 0.1)
    assert raised.value.args[0].txn_requires_abort()
    assert len(fake.made) == 3 and txn.raw is fake.made[2] and fake.made[2].calls == ["init"]


def test_a_retriable_send_offsets_failure_becomes_abortable(fake: type[FakeProducer]) -> None:
    fake.send_error = KafkaException(KafkaError(KafkaError.COORDINATOR_NOT_AVAILABLE, "moving", retriable=True))
    txn = producer()
    txn.begin()
    with pytest.raises(KafkaException) as raised:
        txn.send_offsets([], object(), 0.5)
    error = raised.value.args[0]
    assert error.code() == KafkaError.COORDINATOR_NOT_AVAILABLE and error.txn_requires_abort()
    txn.abort(1)
    assert fake.made[0].calls[-1] == "abort" and len(fake.made) == 1


def test_a_fatal_send_offsets_failure_is_raised_as_it_is(fake: type[FakeProducer]) -> None:
    fake.send_error = KafkaException(KafkaError(KafkaError._FENCED, "fenced", fatal=True))
    txn = producer()
    txn.begin()
    with pytest.raises(KafkaException) as raised:
        txn.send_offsets([], object(), 0.5)
    assert raised.value is fake.send_error and len(fake.made) == 1
