"""Idle schedules written straight into the schedules changelog, for benches at the seed's scale.

Creating schedules through commands runs at 1,300-4,300 a second on this machine (bench/import.py,
bench/scale.py), so 5 or 20 million take one to four hours to load. The engine's state at that size can
be had in a minute by writing what the engine itself would have written: one `ScheduleState` per
schedule (a one-shot due `far_ms`, beyond any horizon), with the `wake` header, on the partition the
engine's own partitioner gives its key. An engine started afterwards restores them as after a takeover.
What this skips: the commands, their validation and the tenant's admission (the `idle` tenant's
schedule count is not charged), so a bench using it measures the cost of the state, not of loading it.
"""
from __future__ import annotations

import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from confluent_kafka import Producer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scheduler.control.client import make_spec  # noqa: E402
from scheduler.engine.timeline_keys import WAKE_HEADER, wake_key  # noqa: E402
from scheduler.wire.codec import Codec  # noqa: E402
from scheduler.wire.partitioning import partition_for  # noqa: E402

IDLE_TENANT = "idle"


def idle_state(n: int, spec: dict, far_ms: int) -> dict:
    sid = f"idle-{n:08d}"
    return {"schedule_id": sid, "tenant": IDLE_TENANT, "version": 1, "state": "ACTIVE", "spec": spec,
            "idempotency_key": None, "create_command_id": f"c-{n}", "created_at_ms": far_ms - 86_400_000,
            "updated_at_ms": far_ms - 86_400_000, "next_fire_ms": far_ms, "fired_count": 0, "pending": [],
            "running": []}


def write_idle_states(bootstrap: str, topic: str, count: int, partitions: int, far_ms: int) -> float:
    """Writes `count` idle schedules into the schedules changelog `topic`; returns the seconds it took."""
    began = time.monotonic()
    codec = Codec.default()
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.num.messages": 10_000,
                         "queue.buffering.max.messages": 1_000_000, "compression.type": "lz4"})
    spec = make_spec("once", datetime.fromtimestamp(far_ms / 1000, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ"))
    for n in range(count):
        state = idle_state(n, spec, far_ms)
        key = state["schedule_id"].encode()
        value, headers = codec.encode("ScheduleState", state), [(WAKE_HEADER, wake_key(state) or b"")]
        while True:
            try:
                producer.produce(topic, value, key, partition_for(key, partitions), headers=headers)
                break
            except BufferError:
                producer.poll(0.1)
        if n % 10_000 == 0:
            producer.poll(0)
            if n and n % 1_000_000 == 0:
                print(f"idle states: {n:,} of {count:,} written", file=sys.stderr)
    if producer.flush(300):
        raise RuntimeError(f"idle states: {len(producer)} records not delivered to {topic}")
    return time.monotonic() - began
