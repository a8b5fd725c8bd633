"""The engine's CPU per CREATE, without Kafka: `python bench/create_path.py [--count 20000] [--profile]`.

One `SchedulerTask` on a real RocksDB `PartitionStore` in a temporary directory takes N CREATE commands
(encoded as the client encodes them), then the AdmissionRequests it put in its outbox, then the
AdmissionResults those produced: the three inputs a create costs the engine, in turns of `--turn`
commands committed to the store as the runtime commits them. Prints microseconds per create (best of
`--rounds`) and, with `--profile`, cProfile's top functions by own time. Not included: consuming,
producing and committing the Kafka transaction (see the engine's "slow turn" log lines for those).
"""
from __future__ import annotations

import argparse
import cProfile
import pstats
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from scheduler.control.client import make_spec
from scheduler.engine.config import task_topics
from scheduler.engine.partition_store import PartitionStore
from scheduler.engine.task import SchedulerTask
from scheduler.engine.task_context import TenantPolicy
from scheduler.wire.codec import Codec
from scheduler.wire.topology import Topology

TOPOLOGY = Topology.load()
NOW_MS = 1_800_000_000_000
SPECS = {
    "once": make_spec("once", "2027-03-01T00:00:00Z", priority="HIGH", payload=b'{"job": "bench"}'),
    "cron": make_spec("cron", "*/5 * * * *", "Europe/Berlin", payload=b'{"job": "bench"}'),
}


def make_task(path: Path, codec: Codec) -> SchedulerTask:
    tenants = TenantPolicy(
        topic=lambda key, tenant, priority: TOPOLOGY.topic_name(key, "bench", tenant=tenant, priority=priority),
        registered=lambda tenant: True, max_active_schedules=lambda tenant: 2**62,
        max_concurrency=lambda tenant: None, retry_allowed=lambda tenant, now_ms: True)
    return SchedulerTask(0, PartitionStore(path), task_topics(TOPOLOGY, "bench"), codec, tenants, 120_000,
                         TOPOLOGY.schedule_partitions)


def commands(codec: Codec, count: int, kind: str, tag: str) -> list[tuple[bytes, bytes]]:
    out = []
    for n in range(count):
        sid = f"{tag}-{n:08d}"
        out.append((sid.encode(), codec.encode("Command", {
            "command_id": str(uuid.uuid4()), "type": "CREATE", "schedule_id": sid, "tenant": "idle",
            "idempotency_key": None, "expected_version": None, "spec": SPECS[kind], "occurrence_id": None,
            "issued_at_ms": NOW_MS, "backfill_from_ms": None, "backfill_to_ms": None, "overlap_override": None})))
    return out


def run_turns(task: SchedulerTask, records: list[tuple[bytes, bytes]], handler: str, turn: int) -> list[Any]:
    """Feed `records` to the handler of input topic `handler` a turn at a time; returns every turn's outbox."""
    out: list[Any] = []
    fn = task.handlers[handler]
    for first in range(0, len(records), turn):
        for offset, (key, value) in enumerate(records[first:first + turn], first):
            fn(key, value, offset, NOW_MS)
        task.admissions.send_reservations(NOW_MS)  # as the runtime does after a turn's inputs
        out.extend(task.ctx.outbox)
        task.changelog_records()
        task.committed({})
    return out


def one_round(codec: Codec, count: int, kind: str, turn: int, workdir: Path, tag: str) -> float:
    topics = task_topics(TOPOLOGY, "bench")
    task = make_task(workdir / tag, codec)
    inputs = commands(codec, count, kind, tag)
    started = time.perf_counter()
    outbox = run_turns(task, inputs, topics.commands, turn)
    requests = [(key, value) for topic, key, value, _ in outbox if topic == topics.admissions]
    outbox = run_turns(task, requests, topics.admissions, turn)
    answers = [(key, value) for topic, key, value, _ in outbox if topic == topics.admission_results]
    outbox = run_turns(task, answers, topics.admission_results, turn)
    seconds = time.perf_counter() - started
    accepted = sum(1 for topic, _, value, _ in outbox if topic == topics.command_results
                   and codec.decode("CommandResult", value)["status"] == "ACCEPTED")
    task.store.close()
    if accepted != count:
        raise RuntimeError(f"{accepted} of {count} creates accepted")
    return seconds / count * 1e6


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--count", type=int, default=20_000)
    p.add_argument("--kind", choices=sorted(SPECS), default="once")
    p.add_argument("--turn", type=int, default=1000, help="commands per committed turn")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--profile", action="store_true")
    args = p.parse_args()
    codec = Codec.default()
    workdir = Path(tempfile.mkdtemp(prefix="bench-create-path-"))
    try:
        if args.profile:
            profiler = cProfile.Profile()
            profiler.runcall(one_round, codec, args.count, args.kind, args.turn, workdir, "profile")
            pstats.Stats(profiler, stream=sys.stdout).sort_stats("tottime").print_stats(25)
        best = min(one_round(codec, args.count, args.kind, args.turn, workdir, f"r{n}") for n in range(args.rounds))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"{args.kind}: {best:.1f} us per create in the engine's task (best of {args.rounds}), "
          f"{1e6 / best:,.0f} creates/s on one core")
    return 0


if __name__ == "__main__":
    sys.exit(main())
