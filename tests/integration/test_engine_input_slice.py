"""A turn's input slice on the real broker: a bulk load of CreateBatch records read over many turns,
each left-over record read again by the next, every create answered exactly once."""
from __future__ import annotations

import time
import uuid
from collections import Counter

from confluent_kafka import Consumer, TopicPartition
from engine_harness import TOPOLOGY, SchedulerProcess, ensure_layout, scrape

from conftest import delete_topics
from scheduler.broker.ports import free_port
from scheduler.control.bulk import CreateRequest
from scheduler.control.client import SchedulerClient, make_spec
from scheduler.wire.codec import Codec

COUNT = 6_000  # 750 a partition: a full CreateBatch and a part of one each, so records of one partition wait
PARTITIONS = range(TOPOLOGY.schedule_partitions)


def wait_consumed(bootstrap: str, prefix: str, timeout: float) -> None:
    """Until the engine's group has committed every commands record: all of its answers are then written."""
    topic = TOPOLOGY.topic_name("commands", prefix)
    group = TOPOLOGY.tasks["scheduler"].consumer_group(prefix)
    probe = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        deadline = time.monotonic() + timeout
        while True:
            committed = probe.committed([TopicPartition(topic, p) for p in PARTITIONS], timeout=10)
            ends = [probe.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in PARTITIONS]
            if [tp.offset for tp in committed] == ends:
                return
            assert time.monotonic() < deadline, f"commands not all consumed: {committed} vs {ends}"
            time.sleep(0.2)
    finally:
        probe.close()


def answers(bootstrap: str, prefix: str) -> Counter[str]:
    """Every CommandResult on the topic, read to its end: how often each command id was answered."""
    topic = TOPOLOGY.topic_name("command-results", prefix)
    reader = Consumer({"bootstrap.servers": bootstrap, "group.id": f"r-{uuid.uuid4()}", "enable.auto.commit": False,
                       "isolation.level": "read_committed"})
    codec = Codec.default()
    try:
        ends = {p: reader.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in PARTITIONS}
        reader.assign([TopicPartition(topic, p, 0) for p in PARTITIONS])
        seen: Counter[str] = Counter()
        deadline = time.monotonic() + 60
        while any(reader.position([TopicPartition(topic, p)])[0].offset < end for p, end in ends.items()):
            assert time.monotonic() < deadline, "results topic not read to its end"
            for msg in reader.consume(5000, timeout=0.5):
                if msg.error() is None:
                    seen[codec.decode("CommandResult", msg.value())["command_id"]] += 1
        return seen
    finally:
        reader.close()


def test_a_bulk_load_read_one_record_a_turn_answers_every_create_exactly_once(kafka_bootstrap, tmp_path):
    prefix = f"slice{uuid.uuid4().hex[:6]}"
    ensure_layout(kafka_bootstrap, prefix, ["acme"])
    port = free_port()
    engine = SchedulerProcess(kafka_bootstrap, prefix, tmp_path / "state", "slice",
                              ("--input-slice-ms", "0", "--metrics-port", str(port))).start()
    client = SchedulerClient(kafka_bootstrap, prefix, timeout_s=120)
    try:
        results = client.create_many([CreateRequest("acme", make_spec("cron", "0 4 * * *"), schedule_id=f"s-{n}")
                                      for n in range(COUNT)])
        assert Counter(r["status"] for r in results) == {"ACCEPTED": COUNT}, engine.log_tail()
        assert scrape(port)[("scheduler_inputs_deferred_total", ())] > 0, "one record a turn: the others wait"
        wait_consumed(kafka_bootstrap, prefix, 60)
        answered = answers(kafka_bootstrap, prefix)
        assert Counter(answered[r["command_id"]] for r in results) == {1: COUNT}, "each create answered once"
    finally:
        client.close()
        engine.terminate()
        delete_topics(kafka_bootstrap, prefix)
