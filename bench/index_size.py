"""What the broker's index-file size costs a staged burst: `python bench/index_size.py [--count 500000]`.

One transaction writes N occurrence-sized records over 101 topics of 8 partitions (80% to one topic,
the shape of bench/peak's burst) plus one tombstone each to an 8-partition compacted topic, is held
open, then committed, while a `read_committed` reader measures when every record became visible. Two
topic sets differ only in `segment.index.bytes`: Kafka's default 10 MiB and the 1 MiB the layout sets
(docs/decisions/0003-index-file-size.md). Rounds alternate between them, each on fresh topics (the
cost is paid on a partition's first index entries), side by side in one run. Uses `--bootstrap`
(default $KAFKA_BOOTSTRAP_SERVERS) or starts a local broker with its data on disk; writes
`bench/results/index-size-<N>.md`.
"""
from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parent))

from burst_common import end_progress, owners, progress  # noqa: E402
from scheduler.broker.local import LocalBroker, free_port  # noqa: E402
from scheduler.engine.config import PRODUCER_BATCHING  # noqa: E402
from scheduler.kafka.admin import delete_prefixed_topics  # noqa: E402
from scheduler.wire.partitioning import PRODUCER_PARTITIONER_CONF  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
TOPICS = 101
LARGE_SHARE = 0.8
PARTITIONS = 8
VALUE_BYTES = 102
VARIANTS = {"Kafka default, 10 MiB": 10 * 1024 * 1024, "layout, 1 MiB": 1024 * 1024}


@dataclass
class Round:
    variant: str
    staged_s: float
    commit_s: float
    visible_s: float


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=500_000, help="records in the transaction")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per variant")
    parser.add_argument("--hold", type=float, default=5.0, help="seconds the transaction stays open after staging")
    parser.add_argument("--bootstrap", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS"))
    args = parser.parse_args()
    broker = None
    data_dir = None
    if not args.bootstrap:
        data_dir = Path(tempfile.mkdtemp(prefix="bench-index-"))
        broker = LocalBroker(data_dir, port=free_port(), controller_port=free_port())
        args.bootstrap = broker.start()
    try:
        rounds = [one_round(args.bootstrap, variant, args.count, args.hold, n, args.rounds)
                  for n in range(args.rounds) for variant in VARIANTS]
    finally:
        if broker is not None:
            broker.stop()
    report(args, rounds, data_dir)


def one_round(bootstrap: str, variant: str, count: int, hold_s: float, n: int, total: int) -> Round:
    prefix = f"idx{uuid.uuid4().hex[:6]}"
    owner = owners(count, TOPICS - 1, LARGE_SHARE)  # bench/peak's tenants, one topic each
    topic_of = {tenant: f"{prefix}.occurrences.{tenant}" for tenant in dict.fromkeys(owner)}
    topics = list(topic_of.values())
    changelog = f"{prefix}.changelog"
    index_bytes = str(VARIANTS[variant])
    admin = AdminClient({"bootstrap.servers": bootstrap})
    new = [NewTopic(t, PARTITIONS, 1, config={"segment.index.bytes": index_bytes}) for t in topics]
    new.append(NewTopic(changelog, PARTITIONS, 1,
                        config={"segment.index.bytes": index_bytes, "cleanup.policy": "compact"}))
    try:
        for future in admin.create_topics(new).values():
            future.result()
        time.sleep(2)
        records = [(topic_of[tenant], f"{tenant}-{i}".encode()) for i, tenant in enumerate(owner)]
        random.Random(7).shuffle(records)  # interleaved, as the engine's fair dispatch sends them
        return transaction(bootstrap, prefix, topics, records, changelog, variant, hold_s, f"{n + 1}/{total}")
    finally:
        delete_prefixed_topics(bootstrap, prefix, timeout=120)


def transaction(bootstrap: str, prefix: str, topics: list[str], records: list[tuple[str, bytes]], changelog: str,
                variant: str, hold_s: float, label: str) -> Round:
    count = len(records)
    values = [os.urandom(VALUE_BYTES) for _ in range(4096)]  # incompressible, like encoded occurrences
    producer = Producer({"bootstrap.servers": bootstrap, **PRODUCER_PARTITIONER_CONF, "transactional.id": prefix,
                         **PRODUCER_BATCHING, "transaction.timeout.ms": 120_000})
    producer.init_transactions(30)
    producer.begin_transaction()
    started = time.perf_counter()
    for n, (topic, key) in enumerate(records):
        while True:
            try:
                producer.produce(topic, values[n % len(values)], key)
                producer.produce(changelog, None, key)
                break
            except BufferError:
                producer.poll(0.05)
        if n % 20_000 == 0:
            progress(f"{label} {variant}", n, count, "staging")
            producer.poll(0)
    producer.flush(300)
    staged_s = time.perf_counter() - started
    reading = Reading()
    reader = threading.Thread(target=read_all, args=(bootstrap, prefix, topics, count, reading), daemon=True)
    reader.start()
    time.sleep(hold_s)
    committing = time.perf_counter()
    producer.commit_transaction(120)
    commit_s = time.perf_counter() - committing
    while reader.is_alive():
        progress(f"{label} {variant}", reading.seen, count, "visible")
        reader.join(0.2)
    end_progress()
    if reading.seen != count:
        raise SystemExit(f"the reader saw {reading.seen:,} of {count:,} records")
    return Round(variant, staged_s, commit_s, reading.last_at - committing)


@dataclass
class Reading:
    seen: int = 0
    last_at: float = 0.0


def read_all(bootstrap: str, prefix: str, topics: list[str], count: int, reading: Reading) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": prefix, "isolation.level": "read_committed",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(t, p, 0) for t in topics for p in range(PARTITIONS)])
    deadline = time.monotonic() + 300
    try:
        while reading.seen < count and time.monotonic() < deadline:
            for message in consumer.consume(10_000, 0.2):
                if message.error() is not None:
                    raise KafkaException(message.error())
                reading.seen += 1
                reading.last_at = time.perf_counter()
    finally:
        consumer.close()


def read_ahead_kb(path: Path) -> str:
    """The read-ahead of the block device holding `path`: the size of each first fault into an index file."""
    device = os.stat(path).st_dev
    queue = Path(f"/sys/dev/block/{os.major(device)}:{os.minor(device)}")
    for candidate in (queue / "queue", queue / ".." / "queue"):
        setting = candidate / "read_ahead_kb"
        if setting.exists():
            return f"{setting.read_text().strip()} KiB"
    return "unknown (not a block device)"


def report(args: argparse.Namespace, rounds: list[Round], data_dir: Path | None) -> None:
    lines = [
        f"# bench/index_size: a staged transaction of {args.count:,} records over "
        f"{TOPICS * PARTITIONS + PARTITIONS} partitions",
        "",
        f"Run at {datetime.now(timezone.utc).isoformat(timespec='seconds')} on {os.cpu_count()} cores "
        f"(broker, producer and reader on the same machine). Command: `python bench/index_size.py "
        f"--count {args.count} --rounds {args.rounds}`.",
        "",
        f"- broker: {'started by the bench, data in ' + str(data_dir) if data_dir else args.bootstrap}; "
        f"read-ahead of its disk: {read_ahead_kb(data_dir) if data_dir else 'not known (external broker)'}",
        f"- {VALUE_BYTES}-byte incompressible values, 80% to one topic; held open {args.hold:.0f} s after staging; "
        "rounds alternate between the variants, each on fresh topics",
        "",
        "| segment.index.bytes | rounds | staging (produce + flush), median s | commit call, median s "
        "| commit to all visible, median s |",
        "|---|---:|---:|---:|---:|",
    ]
    medians = {}
    for variant in VARIANTS:
        mine = [r for r in rounds if r.variant == variant]
        medians[variant] = [statistics.median(getattr(r, f) for r in mine)
                            for f in ("staged_s", "commit_s", "visible_s")]
        staged, commit, visible = medians[variant]
        lines.append(f"| {variant} | {len(mine)} | {staged:.2f} | {commit:.3f} | {visible:.2f} |")
    default, capped = medians.values()
    lines += ["", f"Ratio default / 1 MiB: staging {default[0] / capped[0]:.1f}x, "
                  f"visibility {default[2] / capped[2]:.1f}x.", "", "Every round:", "",
              "| variant | staging s | commit s | visible s |", "|---|---:|---:|---:|"]
    lines += [f"| {r.variant} | {r.staged_s:.2f} | {r.commit_s:.3f} | {r.visible_s:.2f} |" for r in rounds]
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"index-size-{args.count}.md"
    path.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"\nreport: {path}")


if __name__ == "__main__":
    main()
