"""A stage's per-occurrence work without the broker: `python bench/stage_prepare.py [--count 500000] [--profile]`.

Fills a real RocksDB partition store with `--count` strict entries due at one instant (packed as the engine
packs them, 80% one tenant, the rest over 100 small ones, Avro occurrence bodies as materialization writes
them), then times, side by side in one run: the stage's preparation as the engine does it now
(`stage_records.prepare`, as `DueScan.stage` calls it, chunks of `--chunk`, tokens a block at a time), and the
per-entry path it replaced (decode the head, ask the rate limiter, `LocalEntry.unpack`). Reports entries/s,
and the memory the prepared records hold (tracemalloc, at 500,000 the figure ADR 0002 quotes). `--profile`
prints cProfile's top functions of the preparation. Producing and committing are measured by bench/peak.py.
"""
from __future__ import annotations

import argparse
import cProfile
import pstats
import shutil
import tempfile
import time
import tracemalloc
from pathlib import Path

from scheduler.engine.fairness import RateLimits
from scheduler.engine.partition_store import PartitionStore
from scheduler.engine.stage_policy import TOKEN_BLOCK, StagedPartition, instant_range
from scheduler.engine.stage_records import prepare
from scheduler.engine.timeline_keys import DISPATCH, LocalEntry, occurrence_key
from scheduler.wire.codec import Codec

T = 1_800_000_000_000


def fill(path: Path, count: int) -> PartitionStore:
    codec = Codec.default()
    store = PartitionStore(path)
    batch: dict[bytes, bytes] = {}
    for n in range(count):
        tenant = "big" if n < count * 0.8 else f"s{n % 100:03d}"
        sid, oid = f"peak-{n:07d}", f"{n:032x}"
        body = codec.encode("Occurrence", {
            "occurrence_id": oid, "schedule_id": sid, "tenant": tenant, "schedule_version": 1,
            "scheduled_for_ms": T, "available_at_ms": T, "priority": "HIGH", "payload": b'{"job": "bench", "n": 0}',
            "attempt": 1, "dst_rule": None, "catch_up": False})
        topic = f"peak.occurrences.{tenant}.high"
        batch[occurrence_key(DISPATCH, T, sid, T, rank=n)] = LocalEntry(tenant, sid, topic, oid, body).pack()
        if len(batch) == 50_000:
            store.write({"timeline": batch}, {})
            batch = {}
    store.write({"timeline": batch}, {})
    return store


def prepare_now(store: PartitionStore, chunk: int) -> tuple[StagedPartition, dict]:
    """As StageRunner._prepare does it: blocks of tokens, records cut out of the packed entries."""
    limits = RateLimits(lambda tenant: 1_000_000.0)
    part, groups, left = StagedPartition(*instant_range(T)), {}, {}

    def refill(raw: bytes) -> int:
        return limits.bucket(raw.decode()).take(TOKEN_BLOCK, T) or -1

    while not part.done:
        prepare(store.items_from("timeline", part.cursor, part.end), part, chunk, left, refill, groups)
    return part, groups


def prepare_before(store: PartitionStore, chunk: int) -> int:
    """The per-entry path staging had before (issue 16): head, a token per entry, LocalEntry.unpack."""
    limits = RateLimits(lambda tenant: 1_000_000.0)
    cursor, end = instant_range(T)
    taken: list[LocalEntry] = []
    while True:
        scanned = 0
        for key, raw in store.items_from("timeline", cursor, end):
            if scanned == chunk:
                break
            scanned += 1
            cursor = key + b"\x00"
            _, overlap_policy, tenant = LocalEntry.head(raw)
            if overlap_policy == "ALLOW" and limits.bucket(tenant).take(1, T):
                taken.append(LocalEntry.unpack(raw))
        else:
            return len(taken)


def main() -> None:
    cli = argparse.ArgumentParser(description=__doc__)
    cli.add_argument("--count", type=int, default=500_000)
    cli.add_argument("--chunk", type=int, default=20_000)
    cli.add_argument("--profile", action="store_true")
    args = cli.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="bench-stage-prepare-"))
    try:
        started = time.perf_counter()
        store = fill(workdir / "p0", args.count)
        print(f"filled {args.count:,} entries in {time.perf_counter() - started:.1f}s")
        for label, run in (("before (per entry: head, token, LocalEntry.unpack)", lambda: prepare_before(store, args.chunk)),
                           ("now (stage_records.prepare)", lambda: len(prepare_now(store, args.chunk)[0].sent))):
            started, cpu = time.perf_counter(), time.process_time()
            n = run()
            seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
            print(f"{label}: {n:,} in {seconds:.2f}s wall ({n / seconds:,.0f}/s), {cpu:.2f}s CPU "
                  f"({n / cpu:,.0f}/s of one core)")
        tracemalloc.start()
        base = tracemalloc.get_traced_memory()[0]
        part, groups = prepare_now(store, args.chunk)
        held = tracemalloc.get_traced_memory()[0] - base
        tracemalloc.stop()
        n = len(part.sent)
        print(f"memory held by {n:,} prepared records (values, keys, the stage's key list and set): "
              f"{held / 2**20:,.0f} MiB, {held / max(1, n):,.0f} bytes each")
        del part, groups
        if args.profile:
            profiler = cProfile.Profile()
            profiler.enable()
            prepare_now(store, args.chunk)
            profiler.disable()
            pstats.Stats(profiler).sort_stats("tottime").print_stats(12)
        store.close()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
