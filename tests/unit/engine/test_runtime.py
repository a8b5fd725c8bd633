"""SchedulerProcess turns: one transaction per turn holding the outputs and the consumed offsets, the local
store written only after the commit, an aborted turn's inputs read again.

Proves what scheduler/engine/runtime.py promises for one `_turn`, with the group consumer and the turns'
transactional producer scripted (no broker: the client constructors the process makes are replaced by plain
classes) and a real task over RocksDB under tmp_path: the offsets committed are the next ones to read, tagged
with the owner; the schedule a command creates reaches the store only once the commit succeeded; a commit
that needs an abort rewinds the inputs and leaves the store as it was; an error that needs no abort is not
swallowed; an input slice spent leaves the rest of the records to be read again.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Message, TopicPartition
from prometheus_client import CollectorRegistry

from scheduler.control.client import make_spec
from scheduler.engine import previous_owner, runtime
from scheduler.engine.config import EngineConfig
from scheduler.engine.metrics import EngineMetrics
from scheduler.engine.partition_store import PartitionStore
from scheduler.engine.previous_owner import owner_tag
from scheduler.engine.runtime import SchedulerProcess

NOW = 1_800_000_000_000


@dataclass
class GroupConsumer:
    """Each consume call hands the next scripted batch; seeks are recorded."""

    batches: list[list[Message]] = field(default_factory=list)
    seeks: list[tuple[str, int, int]] = field(default_factory=list)

    def consume(self, num_messages: int, timeout: float) -> list[Message]:
        return self.batches.pop(0) if self.batches else []

    def seek(self, tp: TopicPartition) -> None:
        self.seeks.append((tp.topic, tp.partition, tp.offset))

    def memberid(self) -> str:
        return "member-1"

    def consumer_group_metadata(self) -> str:
        return "group-metadata"

    def close(self) -> None:
        pass


class Delivered:
    def __init__(self, offset: int) -> None:
        self._offset = offset

    def offset(self) -> int:
        return self._offset


class RawProducer:
    def __init__(self) -> None:
        self.records: list[tuple[str, bytes | None]] = []

    def produce(self, topic: str, value: bytes | None = None, key: bytes | None = None, **_: Any) -> None:
        self.records.append((topic, key))

    def poll(self, timeout: float) -> int:
        return 0

    def flush(self, timeout: float) -> int:
        return 0


@dataclass
class TurnProducer:
    """The turns' TransactionalProducer, scripted: `commit_error` is raised by the commit."""

    raw: RawProducer = field(default_factory=RawProducer)
    calls: list[str] = field(default_factory=list)
    offsets: list[tuple[str, int, int, str | None]] = field(default_factory=list)
    commit_error: KafkaError | None = None

    def begin(self) -> None:
        self.calls.append("begin")

    def produce(self, topic: str, value: bytes | None, key: bytes | None, *, partition: int,
                on_delivered: Callable[[Delivered], None], headers: object = None) -> None:
        self.raw.records.append((topic, key))
        on_delivered(Delivered(len(self.raw.records) - 1))

    def flush(self, timeout_s: float) -> None:
        self.calls.append("flush")

    def send_offsets(self, offsets: list[TopicPartition], group_metadata: object, timeout_s: float) -> None:
        self.calls.append("send_offsets")
        self.offsets += [(tp.topic, tp.partition, tp.offset, tp.metadata) for tp in offsets]

    def commit(self, timeout_s: float, deadline_s: float) -> None:
        self.calls.append("commit")
        if self.commit_error is not None:
            raise KafkaException(self.commit_error)

    def abort(self, timeout_s: float) -> None:
        self.calls.append("abort")


@dataclass
class Rig:
    process: SchedulerProcess
    consumer: GroupConsumer
    producer: TurnProducer
    registry: CollectorRegistry
    store: PartitionStore

    def command(self, offset: int, schedule_id: str, partition: int = 0) -> Message:
        spec = make_spec("cron", "*/5 * * * *", "Europe/London")
        value = {"command_id": f"c-{schedule_id}", "type": "CREATE", "schedule_id": schedule_id, "tenant": "acme",
                 "idempotency_key": None, "expected_version": None, "spec": spec, "occurrence_id": None,
                 "issued_at_ms": NOW}
        return Message(topic=self.process.topics.commands, partition=partition, offset=offset,
                       key=schedule_id.encode(), value=self.process.codec.encode("Command", value), error=None)

    def turn(self, *messages: Message) -> None:
        self.consumer.batches.append(list(messages))
        self.process._turn()


@pytest.fixture
def rig(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Rig]:
    consumer = GroupConsumer()
    monkeypatch.setattr(runtime, "Consumer", lambda conf: consumer)
    monkeypatch.setattr(runtime, "AdminClient", lambda conf: object())
    monkeypatch.setattr(previous_owner, "Consumer", lambda conf: GroupConsumer())
    registry = CollectorRegistry()
    config = EngineConfig("unused:9092", "pfx", tmp_path, "i-1", open_tenants=True, input_slice_ms=60_000)
    process = SchedulerProcess(config, clock=lambda: NOW / 1000, metrics=EngineMetrics(registry))
    producer = TurnProducer()
    process.producer = producer  # type: ignore[assignment]
    store = PartitionStore(tmp_path / "p0")
    process.tasks.start(0, process._make_task(0, store))
    yield Rig(process, consumer, producer, registry, store)
    process.assignment.close()
    store.close()


def test_a_turn_commits_its_outputs_with_the_next_offsets_and_only_then_writes_the_store(rig: Rig) -> None:
    rig.turn(rig.command(41, "s1"))
    tag = owner_tag(rig.process._transactional_id, "member-1")
    assert rig.producer.calls == ["begin", "flush", "send_offsets", "commit"]
    assert rig.producer.offsets == [(rig.process.topics.commands, 0, 42, tag)]
    changelog = rig.process.topics.changelogs["schedules"]
    assert (changelog, b"s1") in rig.producer.raw.records
    assert rig.store.get("schedules", b"s1") is not None
    assert rig.store.changelog_offset("schedules") == rig.producer.raw.records.index((changelog, b"s1")) + 1


def test_a_commit_that_needs_an_abort_rewinds_the_inputs_and_leaves_the_store_as_it_was(rig: Rig) -> None:
    rig.producer.commit_error = KafkaError(KafkaError._TIMED_OUT, "commit timed out", txn_requires_abort=True)
    rig.turn(rig.command(41, "s1"), rig.command(42, "s2"))
    assert rig.producer.calls[-2:] == ["commit", "abort"]
    assert rig.consumer.seeks == [(rig.process.topics.commands, 0, 41)]
    assert rig.store.get("schedules", b"s1") is None and rig.store.changelog_offset("schedules") == 0
    assert rig.registry.get_sample_value("scheduler_transactions_total", {"outcome": "aborted"}) == 1
    rig.producer.commit_error = None
    aborted = len(rig.producer.raw.records)
    rig.turn(rig.command(41, "s1"), rig.command(42, "s2"))  # read again: now committed
    retried = rig.producer.raw.records[aborted:]
    assert retried == rig.producer.raw.records[:aborted], "the aborted turn's outputs were forgotten, not sent twice"
    assert rig.store.get("schedules", b"s1") is not None and rig.store.get("schedules", b"s2") is not None


def test_an_error_that_needs_no_abort_is_not_swallowed(rig: Rig) -> None:
    rig.producer.commit_error = KafkaError(KafkaError._FENCED, "fenced", fatal=True)
    with pytest.raises(KafkaException):
        rig.turn(rig.command(41, "s1"))
    assert "abort" not in rig.producer.calls and rig.store.get("schedules", b"s1") is None


def test_a_record_of_a_partition_not_owned_here_is_neither_handled_nor_committed(rig: Rig) -> None:
    rig.turn(rig.command(7, "s9", partition=3))
    assert rig.producer.offsets == [] and "send_offsets" not in rig.producer.calls


def test_records_past_a_spent_input_slice_are_read_again_next_turn(rig: Rig) -> None:
    rig.process.config.input_slice_ms = -1  # spent before the second record, whatever the machine's speed
    rig.turn(rig.command(41, "s1"), rig.command(42, "s2"), rig.command(43, "s3"))
    assert rig.producer.offsets[0][:3] == (rig.process.topics.commands, 0, 42)
    assert rig.consumer.seeks == [(rig.process.topics.commands, 0, 42)]
    assert rig.registry.get_sample_value("scheduler_inputs_deferred_total") == 2
    assert rig.store.get("schedules", b"s1") is not None and rig.store.get("schedules", b"s2") is None
