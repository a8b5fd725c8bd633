"""What a takeover costs: `python bench/takeover.py [--bootstrap HOST:PORT] [--runs 1]`.

One scheduler process dispatches a steady stream of strict one-shots (`--per-s` due every second) and a
burst of `--burst` one-shots due at T; it is killed with kill -9 15 s before T and a process with another
instance id (and an empty state dir) starts at once. Measured twice side by side, with staging on (the kill
lands while the stage is open) and off: the time from the kill to the first occurrence visible to a
`read_committed` reader, the lag of the steady occurrences due in the 20 s after the kill, and the burst's
lag. Not included: the group's detection of a crash when the replacement starts later than at once.
"""
from __future__ import annotations

import argparse
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition

from scheduler.control.client import SchedulerClient, make_spec
from scheduler.kafka.admin import delete_prefixed_topics, ensure_tenant_topics, ensure_topics
from scheduler.wire.codec import Codec
from scheduler.wire.topology import Topology

TENANTS = ("steady", "burst")
TOPOLOGY = Topology.load()
KILL_BEFORE_T_S = 15


def rfc3339(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).isoformat().replace("+00:00", "Z")


def start(bootstrap: str, prefix: str, instance: str, state: Path, stage: bool) -> subprocess.Popen:
    env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": bootstrap, "SCHEDULER_TOPIC_PREFIX": prefix}
    args = ["--stage-min", "500", "--stage-rate", "100"] if stage else ["--stage-min", "0"]
    log = open(state.parent / f"{instance}.log", "ab")
    return subprocess.Popen([sys.executable, "-m", "scheduler", "run", "--instance-id", instance, "--state-dir",
                             str(state), *args], env=env, stdout=log, stderr=subprocess.STDOUT)


def create(client: SchedulerClient, tenant: str, due_ms: list[int]) -> None:
    ids = [client.send("CREATE", f"{tenant}-{n}", tenant, spec=make_spec("once", rfc3339(ms)))
           for n, ms in enumerate(due_ms)]
    results = client.wait(ids, timeout_s=300)
    assert {r["status"] for r in results.values()} == {"ACCEPTED"}


def reader(bootstrap: str, prefix: str) -> Consumer:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4()}",
                         "isolation.level": "read_committed", "enable.auto.commit": False})
    metadata = consumer.list_topics(timeout=10).topics
    consumer.assign([TopicPartition(topic, p, 0) for t in TENANTS for pr in TOPOLOGY.priorities
                     for topic in [TOPOLOGY.topic_name("occurrences", prefix, tenant=t, priority=pr)]
                     for p in metadata[topic].partitions])
    return consumer


def percentile(values: list[int], q: float) -> int:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else -1


def one_run(bootstrap: str, stage: bool, per_s: int, burst: int) -> dict[str, int]:
    prefix = f"bt{uuid.uuid4().hex[:6]}"
    ensure_topics(bootstrap, TOPOLOGY, prefix)
    for tenant in TENANTS:
        ensure_tenant_topics(bootstrap, TOPOLOGY, prefix, tenant)
    work = Path(tempfile.mkdtemp(prefix="takeover-"))
    first = start(bootstrap, prefix, "a", work / "a", stage)
    second = None
    codec = Codec.default()
    try:
        t_ms = (math.ceil(time.time()) + 45) * 1000
        steady = [t_ms - 35_000 + s * 1000 for s in range(60) for _ in range(per_s)]
        with SchedulerClient(bootstrap, prefix, timeout_s=300) as client:
            create(client, "steady", steady)
            create(client, "burst", [t_ms] * burst)
        consumer = reader(bootstrap, prefix)
        seen: dict[str, tuple[int, int]] = {}  # occurrence id -> (scheduled_for, seen)
        kill_ms = t_ms - KILL_BEFORE_T_S * 1000
        while time.time() * 1000 < kill_ms:
            for msg in consumer.consume(5000, timeout=0.1):
                if not msg.error():
                    occ = codec.decode("Occurrence", msg.value())
                    seen.setdefault(occ["occurrence_id"], (occ["scheduled_for_ms"], int(time.time() * 1000)))
        first.send_signal(signal.SIGKILL)
        first.wait()
        killed_ms = int(time.time() * 1000)
        second = start(bootstrap, prefix, "b", work / "b", stage)
        after_kill: list[int] = []
        expected = len(steady) + burst
        deadline = time.monotonic() + 120
        while len(seen) < expected and time.monotonic() < deadline:
            for msg in consumer.consume(5000, timeout=0.1):
                if msg.error():
                    continue
                now_ms = int(time.time() * 1000)
                occ = codec.decode("Occurrence", msg.value())
                if occ["occurrence_id"] not in seen:
                    seen[occ["occurrence_id"]] = (occ["scheduled_for_ms"], now_ms)
                    after_kill.append(now_ms)
        consumer.close()
        window = [s - d for d, s in seen.values() if killed_ms <= d < killed_ms + 20_000 and d != t_ms]
        burst_lag = [s - d for d, s in seen.values() if d == t_ms]
        return {"kill_to_first_visible_ms": (min(after_kill) - killed_ms) if after_kill else -1,
                "steady_p50_ms": percentile(window, 0.5), "steady_p99_ms": percentile(window, 0.99),
                "steady_max_ms": max(window, default=-1), "burst_p99_ms": percentile(burst_lag, 0.99),
                "missing": expected - len(seen)}
    finally:
        for process in (first, second):
            if process is not None and process.poll() is None:
                process.send_signal(signal.SIGTERM)
                process.wait(30)
        delete_prefixed_topics(bootstrap, prefix)


def main() -> int:
    cli = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    cli.add_argument("--bootstrap", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092"))
    cli.add_argument("--runs", type=int, default=1)
    cli.add_argument("--per-s", type=int, default=20)
    cli.add_argument("--burst", type=int, default=1450)
    args = cli.parse_args()
    print("| staging | kill → first visible (ms) | steady p50 | p99 | max (ms) | burst p99 (ms) | missing |")
    print("|---|---|---|---|---|---|---|")
    for _ in range(args.runs):
        for stage in (True, False):
            r = one_run(args.bootstrap, stage, args.per_s, args.burst)
            print(f"| {'on, stage open at the kill' if stage else 'off'} | {r['kill_to_first_visible_ms']} | "
                  f"{r['steady_p50_ms']} | {r['steady_p99_ms']} | {r['steady_max_ms']} | {r['burst_p99_ms']} | "
                  f"{r['missing']} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
