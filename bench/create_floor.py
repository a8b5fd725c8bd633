"""The CPU a create cannot do without, before any logic: `python bench/create_floor.py [--batches 40] [--cores 2]`.

Whatever the design, each create puts fixed records on the wire, in the project's contracts: its CREATE in the
public Avro framing (here inside a CreateBatch of 500), the schedule's ScheduleState on the compacted changelog
and the tenant's view (one encode, the same bytes twice), and its CommandResult, which the audit ledger sinks
and the reconciliation reads. This measures only those: the client encoding the CREATE, the engine decoding it,
encoding the state and the result and handing the three records to librdkafka (produce() into its queue, no
broker), one RocksDB write per state (in WriteBatches of 500), and the client decoding the result. Best of
three runs each, in this process, one core.

Not included, and all needed: the broker's share (bench/import.py measures it: `broker us/create`), the engine's
decisions (validation, idempotency lookup, the first fire, quota, timeline), Kafka consume and transactions,
the client's line parsing. The ceiling printed is what `--cores` cores would allow if the create cost only this.
"""
from __future__ import annotations

import argparse
import tempfile
import time
import uuid
from collections.abc import Callable

from confluent_kafka import Producer
from rocksdict import Rdict, WriteBatch

from scheduler.control.client import make_spec
from scheduler.wire.codec import Codec

BATCH = 500
NOW_MS = 1_800_000_000_000


def commands(count: int) -> list[dict]:
    spec = {**make_spec("cron", "0 3 * * *", "Europe/Berlin"), "payload": b'{"n": 1}'}
    return [{"command_id": str(uuid.uuid4()), "type": "CREATE", "schedule_id": f"imp-{n:08d}", "tenant": "t1",
             "idempotency_key": f"import:{uuid.uuid4().hex}", "expected_version": None, "spec": spec,
             "occurrence_id": None, "issued_at_ms": NOW_MS, "backfill_from_ms": None, "backfill_to_ms": None,
             "overlap_override": None} for n in range(count)]


def state_of(command: dict) -> dict:
    return {"schedule_id": command["schedule_id"], "tenant": command["tenant"], "version": 1, "state": "ACTIVE",
            "spec": command["spec"], "idempotency_key": command["idempotency_key"],
            "create_command_id": command["command_id"], "created_at_ms": NOW_MS, "updated_at_ms": NOW_MS,
            "next_fire_ms": NOW_MS + 3_600_000, "fired_count": 0, "pending": [], "running": [],
            "admission_waiters": [], "first_next_fires_ms": [NOW_MS + n * 86_400_000 for n in range(1, 6)],
            "lost_attempts": []}


def result_of(command: dict) -> dict:
    return {"command_id": command["command_id"], "schedule_id": command["schedule_id"], "tenant": command["tenant"],
            "command_type": "CREATE", "status": "ACCEPTED", "version": 1,
            "next_fires_ms": [NOW_MS + n * 86_400_000 for n in range(1, 6)], "reason": None, "message": None,
            "source": None, "processed_at_ms": NOW_MS}


def best_us(fn: Callable[[], object], per_call: int) -> float:
    """Best of three: the machine is shared, the minimum is the least disturbed; µs per create."""
    runs = []
    for _ in range(3):
        start = time.perf_counter()
        fn()
        runs.append((time.perf_counter() - start) / per_call * 1e6)
    return min(runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, default=40, help=f"CreateBatch records of {BATCH} creates")
    parser.add_argument("--cores", type=int, default=2)
    args = parser.parse_args()
    codec = Codec.default()
    all_commands = commands(args.batches * BATCH)
    groups = [all_commands[i:i + BATCH] for i in range(0, len(all_commands), BATCH)]
    batches = [codec.encode("CreateBatch", {"batch_id": str(uuid.uuid4()), "commands": g}) for g in groups]
    decoded = [c for b in batches for c in codec.decode("CreateBatch", b)["commands"]]
    state_records = [state_of(c) for c in decoded]
    result_records = [result_of(c) for c in decoded]
    states = [codec.encode("ScheduleState", r) for r in state_records]
    results = [codec.encode("CommandResult", r) for r in result_records]
    producer = Producer({"bootstrap.servers": "127.0.0.1:1", "queue.buffering.max.messages": 2_000_000,
                         "queue.buffering.max.kbytes": 2_000_000, "linger.ms": 60_000,
                         "log_level": 0})  # nothing listens there: the produce() calls only queue
    store = Rdict(tempfile.mkdtemp(prefix="floor-"))
    count = len(all_commands)

    def write_states() -> None:
        for start in range(0, count, BATCH):
            batch = WriteBatch()
            for n in range(start, start + BATCH):
                batch.put(decoded[n]["schedule_id"].encode(), states[n])
            store.write(batch)

    def produce_three() -> None:
        for n in range(count):
            key = decoded[n]["schedule_id"].encode()
            producer.produce("floor.schedules", states[n], key, partition=0)
            producer.produce("floor.schedules.t1", states[n], key, partition=0)
            producer.produce("floor.command-results", results[n], key, partition=0)
        producer.purge()

    rows = [
        ("client: encode the CREATE (in a CreateBatch)",
         lambda: [codec.encode("CreateBatch", {"batch_id": "b", "commands": g}) for g in groups]),
        ("engine: decode the CREATE (from a CreateBatch)", lambda: [codec.decode("CreateBatch", b) for b in batches]),
        ("engine: encode the ScheduleState", lambda: [codec.encode("ScheduleState", r) for r in state_records]),
        ("engine: encode the CommandResult", lambda: [codec.encode("CommandResult", r) for r in result_records]),
        ("engine: RocksDB write of the state", write_states),
        ("engine: produce() state, view and result", produce_three),
        ("client: decode the CommandResult", lambda: [codec.decode("CommandResult", r) for r in results]),
    ]
    total = 0.0
    print(f"{count:,} creates, {len(batches[0]) / BATCH:.0f} B of CreateBatch per create, "
          f"ScheduleState {len(states[0])} B, CommandResult {len(results[0])} B")
    for label, fn in rows:
        us = best_us(fn, count)
        total += us
        print(f"{label:50s} {us:7.2f} us/create")
    print(f"{'sum':50s} {total:7.2f} us/create: at most {args.cores * 1e6 / total:,.0f} creates/s on {args.cores} "
          f"cores, before the broker, the engine's decisions and the client's parsing")
    store.close()


if __name__ == "__main__":
    main()
