"""The audit ledger's delay behind the topics at a steady occurrence rate, and start times.

Starts its own broker (unless --bootstrap / $KAFKA_BOOTSTRAP_SERVERS), a local PostgreSQL three
times and the Connect worker twice (cold: internal topics created; warm: a restart), runs
`audit ensure`, then produces Occurrence records at --rate for --minutes to one tenant's
occurrence topics the way the engine does (transactional, a commit every 100 ms). A poller reads
the new dispatches rows every 250 ms; a row's delay is the poll instant minus its Kafka record
timestamp (the enqueue instant), so the figures are upper bounds with 250 ms resolution. Not
included: the scheduler itself (its dispatch lag is bench/sustained.py's subject).

    python bench/audit.py --rate 2315 --minutes 10
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import psycopg
from confluent_kafka import Producer

from scheduler.audit.connectors import Database, ensure_connectors, render, wait_running
from scheduler.audit.postgres import LocalPostgres
from scheduler.audit.tables import ensure_tables, schema_name
from scheduler.broker.local import LocalBroker, free_port
from scheduler.connect.local import LocalConnect
from scheduler.connect.rest import ConnectRest
from scheduler.kafka.admin import ensure_tenant_topics, ensure_topics
from scheduler.wire.codec import Codec
from scheduler.wire.partitioning import PRODUCER_PARTITIONER_CONF
from scheduler.wire.topology import Topology

TENANT = "bench"
POLL_S = 0.25
RESULTS = Path(__file__).parent / "results"


def timed(call) -> tuple[float, object]:
    began = time.monotonic()
    value = call()
    return time.monotonic() - began, value


def produce(bootstrap: str, prefix: str, rate: float, seconds: float) -> int:
    topology, codec = Topology.load(), Codec.default()
    topics = [topology.topic_name("occurrences", prefix, tenant=TENANT, priority=p) for p in topology.priorities]
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"bench-audit-{uuid.uuid4()}",
                         "linger.ms": 5, **PRODUCER_PARTITIONER_CONF})
    producer.init_transactions()
    began, sent = time.monotonic(), 0
    while time.monotonic() - began < seconds:
        producer.begin_transaction()
        due = int((time.monotonic() - began + 0.1) * rate)
        while sent < due:
            now_ms = int(time.time() * 1000)
            record = {"occurrence_id": f"occ-{sent}", "schedule_id": f"s-{sent % 5000}", "tenant": TENANT,
                      "schedule_version": 1, "scheduled_for_ms": now_ms, "available_at_ms": now_ms,
                      "priority": topology.priorities[sent % 3].upper(), "payload": b"{}", "attempt": 1,
                      "dst_rule": None, "catch_up": False}
            producer.produce(topics[sent % 3], key=record["schedule_id"].encode(),
                             value=codec.encode("Occurrence", record))
            sent += 1
        producer.commit_transaction()
        time.sleep(max(0.0, began + sent / rate - 0.1 - time.monotonic()))
    return sent


def poll_delays(url: str, schema: str, partitions: list[tuple[str, int]], expected: list[int],
                done: threading.Event, grace_s: float) -> list[tuple[float, float]]:
    """Every 250 ms, the rows past the last offset seen on each partition (the primary key's index);
    (record timestamp, delay) per row."""
    delays: list[tuple[float, float]] = []
    last = {key: -1 for key in partitions}
    finished_at = None
    with psycopg.connect(url, autocommit=True) as conn:
        while not (expected and len(delays) >= expected[0]):
            seen = time.time()
            for (topic, partition), offset in last.items():
                rows = conn.execute(f"SELECT kafka_offset, extract(epoch FROM kafka_timestamp) FROM {schema}.dispatches "
                                    "WHERE kafka_topic = %s AND kafka_partition = %s AND kafka_offset > %s",
                                    (topic, partition, offset)).fetchall()
                for row_offset, ts in rows:
                    last[(topic, partition)] = max(last[(topic, partition)], row_offset)
                    delays.append((float(ts), seen - float(ts)))
            if done.is_set():
                finished_at = finished_at or time.monotonic()
                if time.monotonic() - finished_at > grace_s:
                    break
            time.sleep(max(0.0, seen + POLL_S - time.time()))
    return delays


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=float, default=2315.0, help="occurrences per second (the seed's daily average)")
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--bootstrap", default=None)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-audit-"))
    broker = None
    bootstrap = args.bootstrap
    if bootstrap is None:
        broker = LocalBroker(work / "kafka", port=free_port(), controller_port=free_port())
        bootstrap = broker.start()
    servers: list[LocalPostgres] = []
    worker = LocalConnect(work / "connect", bootstrap, f"ba{uuid.uuid4().hex[:6]}", free_port())
    try:
        return run(args, bootstrap, worker, servers)
    finally:
        worker.stop()
        for server in servers:
            server.destroy()
        if broker is not None:
            broker.stop()


def run(args: argparse.Namespace, bootstrap: str, worker: LocalConnect, servers: list[LocalPostgres]) -> int:
    prefix = worker.prefix
    topology = Topology.load()
    ensure_topics(bootstrap, topology, prefix)
    ensure_tenant_topics(bootstrap, topology, prefix, TENANT)
    pg_starts = []
    for _ in range(3):
        servers.append(LocalPostgres())  # its own temporary dir: the `postgres` user cannot enter root's
        seconds, url = timed(servers[-1].start)
        pg_starts.append(seconds)
    for server in servers[:-1]:
        server.destroy()
    cold, _ = timed(worker.start)
    worker.stop()
    warm, _ = timed(worker.start)
    rest = ConnectRest(worker.url)
    with psycopg.connect(url) as conn:
        ensure_tables(conn, prefix)
    configs = render(prefix, Database.from_url(url), topology)
    ensure_connectors(rest, configs)
    wait_running(rest, list(configs), 120)
    done, expected, poller_out = threading.Event(), [], []
    spec = topology.topics["occurrences"]
    partitions = [(topology.topic_name("occurrences", prefix, tenant=TENANT, priority=p), n)
                  for p in topology.priorities for n in range(spec.partitions)]
    poller = threading.Thread(target=lambda: poller_out.append(
        poll_delays(url, schema_name(prefix), partitions, expected, done, 120)))
    poller.start()
    began = time.monotonic()
    sent = produce(bootstrap, prefix, args.rate, args.minutes * 60)
    produced_s = time.monotonic() - began
    expected.append(sent)
    done.set()
    poller.join()
    pairs = poller_out[0]
    delays = [delay for _, delay in pairs]
    first = min(ts for ts, _ in pairs)
    minutes: dict[int, list[float]] = {}
    for ts, delay in pairs:
        minutes.setdefault(int((ts - first) // 60), []).append(delay)
    report = "\n".join([
        f"# bench/audit.py --rate {args.rate:g} --minutes {args.minutes:g}", "",
        f"- produced {sent} occurrences in {produced_s:.1f} s ({sent / produced_s:.0f}/s), transactional, "
        f"commit every 100 ms, 3 topics x 8 partitions", f"- ledger rows seen: {len(delays)} of {sent}",
        f"- ledger delay behind the topics (poll instant - record timestamp, 250 ms polls): "
        f"p50 {statistics.median(delays):.2f} s, p99 {percentile(delays, 0.99):.2f} s, max {max(delays):.2f} s",
        "- PostgreSQL start (initdb + pg_ctl start -w), 3 fresh clusters: "
        + ", ".join(f"{s:.2f} s" for s in pg_starts) + f" (median {statistics.median(pg_starts):.2f} s)",
        f"- Connect worker start to REST ready: cold {cold:.2f} s (internal topics created), warm restart {warm:.2f} s",
        "", "| minute (by record timestamp) | rows | p50 s | p99 s | max s |", "|---|---|---|---|---|",
        *(f"| {m} | {len(v)} | {statistics.median(v):.2f} | {percentile(v, 0.99):.2f} | {max(v):.2f} |"
          for m, v in sorted(minutes.items())),
    ])
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "audit.md").write_text(report + "\n")
    print(report)
    return 0 if len(delays) == sent else 1


if __name__ == "__main__":
    sys.exit(main())
