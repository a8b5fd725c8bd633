"""What a transaction costs as a function of the partitions it touches: `python bench/txn_partitions.py`.

The engine's fair dispatch interleaves tenants, so one loop turn's transaction writes to every
busy tenant's occurrence partitions. This measures, on one broker and with the engine's producer
settings, produce+flush time of transactions of N records spread over 8 or over many partitions,
interleaved in one run (median of `--rounds`). Uses `--bootstrap` (default $KAFKA_BOOTSTRAP_SERVERS)
or starts a local broker; its topics are deleted at the end.
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import uuid
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from scheduler.broker.local import LocalBroker, free_port
from scheduler.engine.config import PRODUCER_BATCHING, EngineConfig
from scheduler.kafka.admin import delete_prefixed_topics
from scheduler.wire.partitioning import PRODUCER_PARTITIONER_CONF


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS"))
    parser.add_argument("--topics", type=int, default=101, help="topics of 8 partitions (tenants)")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    broker = None
    if not args.bootstrap:
        broker = LocalBroker(Path(tempfile.mkdtemp(prefix="bench-txn-")), port=free_port(), controller_port=free_port())
        args.bootstrap = broker.start()
    prefix = f"txn{uuid.uuid4().hex[:6]}"
    try:
        measure(args.bootstrap, prefix, args.topics, args.rounds)
    finally:
        delete_prefixed_topics(args.bootstrap, prefix, timeout=120)
        if broker is not None:
            broker.stop()


def measure(bootstrap: str, prefix: str, topic_count: int, rounds: int) -> None:
    topics = [f"{prefix}.t{n}" for n in range(topic_count)]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(t, 8, 1) for t in topics]).values():
        future.result()
    time.sleep(3)
    producer = Producer({"bootstrap.servers": bootstrap, **PRODUCER_PARTITIONER_CONF,
                         "transactional.id": prefix, **PRODUCER_BATCHING})
    producer.init_transactions(30)

    def transaction(records: int, spread: int) -> float:
        started = time.perf_counter()
        producer.begin_transaction()
        for n in range(records):
            producer.produce(topics[n % spread], b"x" * 100, uuid.uuid4().bytes)
        producer.flush(60)
        producer.commit_transaction()
        return time.perf_counter() - started

    cases = [(records, spread) for records in (5_000, EngineConfig.dispatch_budget) for spread in (1, topic_count)]
    seconds: dict[tuple[int, int], list[float]] = {case: [] for case in cases}
    transaction(1_000, topic_count)  # metadata and connections for every topic first
    for _ in range(rounds):
        for case in cases:
            seconds[case].append(transaction(*case))
    print("| records per transaction | partitions touched | median seconds | records/s |")
    print("|---:|---:|---:|---:|")
    for (records, spread), values in seconds.items():
        median = statistics.median(values)
        print(f"| {records:,} | {spread * 8:,} | {median:.3f} | {records / median:,.0f} |")


if __name__ == "__main__":
    main()
