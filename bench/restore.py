"""Restore throughput: `python bench/restore.py --schedules 1000000 [--bootstrap HOST:PORT]`.

Writes `--schedules` idle ScheduleState records (one-shots 60 days out) straight into the schedules changelog of
a fresh prefix (bench/idle_states.py: spread over the partitions as the engine would, with the `wake` header), and copies them without it into a second prefix (as records written
before the header: restore decodes each one; `--header-only` skips it). Then restores every partition of each
into an empty store with scheduler.engine.restore_reader.RestoreReader, all partitions at once over one consumer in
200 ms slices as the engine does after a takeover, and reports seconds per million schedules. Not included: the
group's assignment, the stage producers, the process start (see bench/scale.py for the engine end to end).
Writes bench/results/restore-<N>.md.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import scheduler  # noqa: E402
from idle_states import write_idle_states  # noqa: E402
from scheduler.engine.config import task_topics  # noqa: E402
from scheduler.engine.partition_store import PartitionStore  # noqa: E402
from scheduler.engine.restore_reader import RestoreReader  # noqa: E402
from scheduler.kafka.admin import ensure_topics  # noqa: E402
from scheduler.wire.codec import Codec  # noqa: E402
from scheduler.wire.topology import Topology  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


def copy_without_headers(bootstrap: str, source: str, target: str, count: int, partitions: int) -> None:
    """The same records as written before the header existed: copied as they are, minus the header."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-restore-copy", "enable.auto.commit": False,
                         "fetch.max.bytes": 64 * 1024 * 1024})
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.num.messages": 10_000,
                         "queue.buffering.max.messages": 1_000_000, "compression.type": "lz4"})
    consumer.assign([TopicPartition(source, p, 0) for p in range(partitions)])
    copied = 0
    while copied < count:
        for msg in consumer.consume(10_000, timeout=1.0):
            if msg.error():
                continue
            while True:
                try:
                    producer.produce(target, msg.value(), msg.key(), partition=msg.partition())
                    break
                except BufferError:
                    producer.poll(0.1)
            copied += 1
        producer.poll(0)
    producer.flush(120)
    consumer.close()


def restore_all(bootstrap: str, topics: dict[str, str], partitions: int,
                workdir: Path) -> tuple[float, float, int]:
    """Wall seconds, CPU seconds of this process (librdkafka's and RocksDB's threads included) and schedules
    restored. Every partition at once over one reader, stepped in 200 ms slices, as the engine's assignment does
    after a takeover; the stores' close is included."""
    codec = Codec.default()
    reader = RestoreReader({"bootstrap.servers": bootstrap}, topics, codec)
    reader.connect()  # as the engine's, at its start
    started = time.monotonic()
    cpu = time.process_time()
    stores = {p: PartitionStore(workdir / f"p{p}") for p in range(partitions)}
    restores = reader.begin(stores)
    while reader.restores:
        reader.step(time.monotonic() + 0.2)
    reader.close()
    for store in stores.values():
        store.close(collect=False)  # never opened again here
    return (time.monotonic() - started, time.process_time() - cpu,
            sum(restore.applied["schedules"] for restore in restores.values()))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--schedules", type=int, default=1_000_000)
    p.add_argument("--rounds", type=int, default=3, help="restores of each variant (median reported)")
    p.add_argument("--bootstrap", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092"))
    p.add_argument("--loaded", help="prefix of an earlier run's header variant holding --schedules (not loaded again)")
    p.add_argument("--header-only", action="store_true", help="skip the variant without the header (decoded)")
    args = p.parse_args()
    topology = Topology.load()
    partitions = topology.schedule_partitions
    variants = ("wake header",) if args.header_only else ("wake header", "no header (decoded)")
    prefixes = {name: f"rb{uuid.uuid4().hex[:6]}" for name in variants}
    prefixes[variants[0]] = args.loaded or prefixes[variants[0]]
    schedules = {name: topology.topic_name("schedules", prefix) for name, prefix in prefixes.items()}
    began = time.monotonic()
    if not args.loaded:
        ensure_topics(args.bootstrap, topology, prefixes[variants[0]], timeout=120)
        far_ms = int(time.time() * 1000) + 60 * 86_400_000
        write_idle_states(args.bootstrap, schedules[variants[0]], args.schedules, partitions, far_ms)
    if not args.header_only:
        ensure_topics(args.bootstrap, topology, prefixes[variants[1]], timeout=120)
        copy_without_headers(args.bootstrap, schedules[variants[0]], schedules[variants[1]], args.schedules,
                             partitions)
    print(f"loaded {args.schedules:,} in {time.monotonic() - began:.1f} s (prefixes {prefixes})", file=sys.stderr)
    seconds: dict[str, list[float]] = {name: [] for name in variants}
    cpu: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(args.rounds):
        for name in variants:  # side by side: the variants alternate, so the machine's load hits both
            workdir = Path(tempfile.mkdtemp(prefix="bench-restore-"))
            try:
                topics = task_topics(topology, prefixes[name]).changelogs
                took, used, applied = restore_all(args.bootstrap, topics, partitions, workdir)
            finally:
                shutil.rmtree(workdir)
            assert applied == args.schedules, f"{name}: restored {applied:,} of {args.schedules:,}"
            seconds[name].append(took)
            cpu[name].append(used)
            print(f"{name}: {took:.1f} s, CPU {used:.1f} s", file=sys.stderr)
    lines = [f"# bench/restore: {args.schedules:,} idle schedules over {partitions} partitions", "",
             "Command: `python bench/restore.py " + " ".join(sys.argv[1:]) + "`", "",
             "| schedules changelog | restore s (median) | runs | s per million | schedules/s | CPU s per million |",
             "|---|---:|---|---:|---:|---:|"]
    for name, runs in seconds.items():
        median = statistics.median(runs)
        lines.append(f"| {name} | {median:.1f} | {', '.join(f'{r:.1f}' for r in runs)} | "
                     f"{median / args.schedules * 1e6:.1f} | {args.schedules / median:,.0f} | "
                     f"{statistics.median(cpu[name]) / args.schedules * 1e6:.1f} |")
    if not args.header_only:
        ratio = statistics.median(seconds["no header (decoded)"]) / statistics.median(seconds["wake header"])
        lines += ["", f"Decoding every schedule costs {ratio:.1f}x the restore with the header."]
    lines += ["", "CPU is this process's (librdkafka's and RocksDB's threads included), not the broker's: on a loaded",
              "machine it is the figure to compare. Every partition at once into empty stores, in one process, in",
              "200 ms slices as the engine restores after a takeover; the group, the stage producers and the",
              f"engine's start are not included. Code restored with: {Path(scheduler.__file__).parent}.", ""]
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"restore-{args.schedules}.md"
    path.write_text("\n".join(lines))
    print(path.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
