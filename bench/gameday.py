"""A first game day: `python bench/gameday.py [--per-s 30] [--phase 30]`.

On a local three-node cluster (scheduler.broker.cluster, replication 3, min.insync.replicas 2), two `scheduler run`
processes with standbys dispatch a steady load of strict one-shots (`--per-s` a second, over three tenants) through
five phases of `--phase` seconds each, announced with their instants in the report:
  1. baseline;
  2. broker down: kill -9 of the broker leading the most occurrence partitions at the phase's start;
  3. broker back: that broker started again at the phase's start (not waited for);
  4. scheduler down: kill -9 of one scheduler process at the phase's start;
  5. recovered: that process restarted (same instance id, same state dir) at the phase's start.
Reported per phase (by due time): lag p50/p99/max of the occurrences due in it (to a read_committed reader), and
over the whole run the reconcile categories computed from the topics against the ids the one-shots must produce:
ABSENT (expected, never seen), UNEXPECTED (seen, never expected), and duplicates (the same id seen again); RSS of the
scheduler processes at start and end. Not yet in this cut (issue 28, item 10): workers, Connect and the PostgreSQL
ledger (so `scheduler reconcile` itself), SIGSTOP, rolling restarts, the top-of-the-minute burst and the 10-minute
outage. Writes bench/results/gameday.md.
"""
from __future__ import annotations

import argparse
import math
import signal
import sys
import tempfile
import time
import uuid
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from burst_common import RESULTS, rfc3339
from failover import Member, percentile, start, stop_members, wait_split
from scheduler.broker.cluster import LocalCluster, NodePorts
from scheduler.broker.local import free_port
from scheduler.control.client import SchedulerClient, make_spec
from scheduler.kafka.admin import ensure_topics
from scheduler.timing.occurrence_id import occurrence_id
from scheduler.wire.codec import Codec
from scheduler.wire.topology import Topology

TOPOLOGY = Topology.load()
CODEC = Codec.default()
TENANTS = ("alpha", "beta", "gamma")
PHASES = ("baseline", "broker down", "broker back", "scheduler down", "recovered")


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def occurrence_topics(prefix: str) -> list[str]:
    return [TOPOLOGY.topic_name("occurrences", prefix, tenant=t, priority=p) for t in TENANTS for p in TOPOLOGY.priorities]


def create_load(client: SchedulerClient, first_s: int, seconds: int, per_s: int) -> dict[str, int]:
    """Strict one-shots due through the run; returns expected occurrence id -> due ms."""
    expected, commands = {}, []
    for second in range(seconds):
        for n in range(per_s):
            due_ms = (first_s + second) * 1000 + n * 1000 // per_s
            sid, tenant = f"gd-{second:04d}-{n:04d}", TENANTS[n % len(TENANTS)]
            commands.append(client.send("CREATE", sid, tenant, spec=make_spec("once", rfc3339(due_ms))))
            expected[occurrence_id(sid, 1, datetime.fromtimestamp(due_ms / 1000, tz=timezone.utc))] = due_ms
    rejected = [r for r in client.wait(commands, timeout_s=600).values() if r["status"] != "ACCEPTED"]
    if rejected:
        raise RuntimeError(f"{len(rejected)} creates rejected, e.g. {rejected[0]}")
    return expected


def leader_of_most(bootstrap: str, topics: list[str]) -> int:
    metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=30).topics
    return Counter(p.leader for t in topics for p in metadata[t].partitions.values()).most_common(1)[0][0]


def run(per_s: int, phase_s: int, work: Path) -> list[str]:
    cluster = LocalCluster(work / "cluster", [NodePorts(free_port(), free_port()) for _ in range(3)])
    events: list[str] = []

    def note(text: str) -> None:
        events.append(f"{datetime.now(timezone.utc):%H:%M:%S.%f}"[:-3] + f" UTC  {text}")
        print(events[-1], file=sys.stderr)

    began = time.monotonic()
    bootstrap = cluster.start()
    note(f"cluster of 3 nodes up in {time.monotonic() - began:.0f} s: {bootstrap}")
    prefix = f"gd{uuid.uuid4().hex[:6]}"
    members: list[Member] = []
    try:
        ensure_topics(bootstrap, TOPOLOGY, prefix, tenants=TENANTS, timeout=120)
        members = [start(bootstrap, prefix, work, name, ("--standbys", "1")) for name in ("a", "b")]
        wait_split(members, 180)
        rss_start = {m.name: rss_mb(m.proc.pid) for m in members}
        seconds = phase_s * len(PHASES)
        with SchedulerClient(bootstrap, prefix, timeout_s=600) as client:
            lead_s = per_s * seconds / 300 + 20
            first_s = math.ceil(time.time() + lead_s)
            expected = create_load(client, first_s, seconds, per_s)
        note(f"{len(expected):,} strict one-shots created, due from {rfc3339(first_s * 1000)} for {seconds} s")
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"gameday-{uuid.uuid4()}",
                             "isolation.level": "read_committed", "enable.auto.commit": False})
        metadata = consumer.list_topics(timeout=30).topics
        consumer.assign([TopicPartition(t, p, OFFSET_BEGINNING) for t in occurrence_topics(prefix)
                         for p in metadata[t].partitions])
        seen: dict[str, int] = {}
        copies: Counter[str] = Counter()

        def read_until(until_s: float) -> None:
            while time.time() < until_s:
                for msg in consumer.consume(5000, timeout=0.1):
                    if msg.error() is None:
                        oid = CODEC.decode("Occurrence", msg.value())["occurrence_id"]
                        copies[oid] += 1
                        seen.setdefault(oid, int(time.time() * 1000))

        victim_broker = leader_of_most(bootstrap, occurrence_topics(prefix))
        victim = members[0]
        faults = [lambda: (cluster.node(victim_broker).kill(),
                           note(f"kill -9 broker {victim_broker} (leads the most occurrence partitions)")),
                  # Launched without waiting, so the timetable holds; the log says when it answered.
                  lambda: (cluster.node(victim_broker).launch(), note(f"broker {victim_broker} restarting")),
                  lambda: (victim.proc.send_signal(signal.SIGKILL), victim.proc.wait(),
                           note(f"kill -9 scheduler {victim.name} (pid {victim.proc.pid})")),
                  lambda: (members.__setitem__(0, start(bootstrap, prefix, work, victim.name, ("--standbys", "1"))),
                           note(f"scheduler {victim.name} restarted (pid {members[0].proc.pid})"))]
        for index, phase in enumerate(PHASES):
            read_until(first_s + index * phase_s)
            note(f"phase {index + 1}: {phase}")
            if index:
                faults[index - 1]()
        read_until(first_s + seconds + 60)
        consumer.close()
        rss_end = {m.name: rss_mb(m.proc.pid) for m in members if m.proc.poll() is None}
        return report(expected, seen, copies, first_s, phase_s, per_s, events, rss_start, rss_end)
    finally:
        stop_members(members)
        cluster.stop(timeout=10)
        print(f"logs and data in {work}", file=sys.stderr)


def report(expected: dict[str, int], seen: dict[str, int], copies: Counter[str], first_s: int, phase_s: int,
           per_s: int, events: list[str], rss_start: dict[str, float], rss_end: dict[str, float]) -> list[str]:
    lines = [f"# Game day, first cut ({datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC)", "",
             f"`python bench/gameday.py --per-s {per_s} --phase {phase_s}`: three local KRaft nodes (replication 3, "
             f"min.insync.replicas 2), two `scheduler run --standbys 1`, {per_s} strict one-shots a second over "
             f"{len(TENANTS)} tenants. Shared 2-core machine (other sessions ran meanwhile).", "", "## Events", "",
             *(f"- {event}" for event in events), "", "## Lag by phase (due time; ms to a read_committed reader)", "",
             "| phase | due | seen | p50 | p99 | max |", "|---|---|---|---|---|---|"]
    for index, phase in enumerate(PHASES):
        low, high = (first_s + index * phase_s) * 1000, (first_s + (index + 1) * phase_s) * 1000
        due = [oid for oid, ms in expected.items() if low <= ms < high]
        lags = [seen[oid] - expected[oid] for oid in due if oid in seen]
        lines.append(f"| {phase} | {len(due)} | {len(lags)} | {percentile(lags, 0.5)} | {percentile(lags, 0.99)} "
                     f"| {max(lags, default=-1)} |")
    absent = set(expected) - set(seen)
    unexpected = set(seen) - set(expected)
    duplicates = sum(count - 1 for count in copies.values() if count > 1)
    lines += ["", "## Completeness", "", f"- ABSENT: {len(absent)}", f"- UNEXPECTED: {len(unexpected)}",
              f"- duplicate deliveries (same occurrence id again): {duplicates}", "",
              "## Scheduler RSS (MB)", "", f"- start: {rss_start}", f"- end: {rss_end}"]
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--per-s", type=int, default=30, help="strict one-shots due a second (default 30)")
    parser.add_argument("--phase", type=int, default=30, help="seconds per phase (default 30)")
    args = parser.parse_args()
    lines = run(args.per_s, args.phase, Path(tempfile.mkdtemp(prefix="gameday-")))
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "gameday.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
