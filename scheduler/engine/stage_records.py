"""A stage's records, prepared in memory during its lead and produced only in its last moments (ADR 0002).

Preparing is the per-occurrence Python work: scan the instant's timeline entries, let through those the
tenant's trigger-rate tokens allow, and cut each packed entry (`timeline_keys.LocalEntry`) into the
record's topic, key and value. It opens no transaction, so it holds back no reader however long it
takes. The hot loop makes no per-entry object beyond the two slices the record needs (no `LocalEntry`,
no decoded strings) and asks for tokens a block at a time, so one tenant's burst costs a few dict
operations an entry.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from scheduler.engine.stage_layout import TopicLayout
from scheduler.engine.stage_policy import StagedPartition
from scheduler.engine.timeline_keys import PLAIN_OVERLAP

# One (topic, partition) of a stage: the records' values and keys, in timeline order.
Group = tuple[list[bytes], list[bytes]]
Run = tuple[str, "int | None", list[bytes], list[bytes]]  # (topic, partition or None for the key's, values, keys)
SLICE_RECORDS = 2_000  # records produced between two looks at the clock
NEVER = -1  # a tenant's allowance when none of its entries may be staged (running-slot quota, no tokens)
KEYS_PARTITION = -1  # librdkafka's RD_KAFKA_PARTITION_UA: the producer's partitioner places the record by key


def prepare(items: Iterable[tuple[bytes, bytes]], part: StagedPartition, share: int, left: dict[bytes, int],
            refill: Callable[[bytes], int], groups: dict[bytes, Group]) -> int:
    """Take up to `share` more entries of the instant from `items` (the timeline from `part.cursor`),
    appending those let through to `groups` (topic bytes -> values, keys). `left` holds each tenant's
    remaining allowance (tenant bytes -> tokens); `refill(tenant)` grants the next block or NEVER.
    Returns how many entries were scanned."""
    sent = part.sent
    scanned = 0
    last = None
    for key, raw in items:
        if scanned == share:
            break
        scanned += 1
        last = key
        end = 11 + (raw[9] << 8 | raw[10])
        tenant = raw[11:end]
        allowed = left.get(tenant, 0)
        if allowed == 0 and raw[8] == PLAIN_OVERLAP:
            allowed = left[tenant] = refill(tenant)
        if allowed <= 0 or raw[8] != PLAIN_OVERLAP:  # decided at dispatch, against what runs then
            if part.first_skipped is None:
                part.first_skipped = key
            continue
        left[tenant] = allowed - 1
        start = end + 2
        end = start + (raw[end] << 8 | raw[end + 1])
        schedule_id = raw[start:end]
        start = end + 2
        end = start + (raw[end] << 8 | raw[end + 1])
        topic = raw[start:end]
        end += 2 + (raw[end] << 8 | raw[end + 1])  # past the occurrence id: the value carries it
        group = groups.get(topic)
        if group is None:
            group = groups[topic] = ([], [])
        group[0].append(raw[end + 4:])
        group[1].append(schedule_id)
        sent.append(key)
    else:
        part.done = True
    if last is not None:
        part.cursor = last + b"\x00"
    return scanned


def by_topic(prepared: dict[int, dict[bytes, Group]]) -> dict[str, Group]:
    """The prepared records of every schedule partition, per occurrence topic."""
    merged: dict[str, Group] = {}
    for groups in prepared.values():
        for topic, (values, keys) in groups.items():
            into = merged.setdefault(topic.decode(), ([], []))
            into[0].extend(values)
            into[1].extend(keys)
    return merged


def produce_order(merged: dict[str, Group], layouts: Mapping[str, TopicLayout]) -> list[Run]:
    """(topic, partition, values, keys) runs, the largest first: each topic's records over the partitions
    its layout stages them in (`stage_layout`), or left to the key's partition when it has none. A stage holds
    back a partition's readers from its first record there until the commit, so the many small runs (the
    small tenants') come last and are held for the shortest time."""
    runs: list[Run] = []
    for topic, (values, keys) in merged.items():
        layout = layouts.get(topic)
        if layout is None:
            runs.append((topic, None, values, keys))
        else:
            runs.extend((topic, partition, v, k) for partition, v, k in layout.split(values, keys))
    runs.sort(key=lambda run: len(run[2]), reverse=True)
    return runs


@dataclass
class Pending:
    """A stage's runs still to produce, and where the last slice stopped."""

    runs: list[Run]
    run: int = 0
    record: int = 0

    @property
    def done(self) -> bool:
        return self.run >= len(self.runs)


def produce_some(produce: Callable[..., None], poll: Callable[[float], object], pending: Pending,
                 timestamp_ms: int, until: float, clock: Callable[[], float]) -> None:
    """Produce pending records, with the instant as their timestamp, until `clock()` reaches `until` or all are
    produced; the next call resumes there. A stage is produced in such slices between turns, so that the turns
    dispatching the occurrences around it are not held up by a produce of hundreds of thousands of records.
    A full local queue waits for room. `produce` is called as confluent-kafka's `Producer.produce` takes its
    arguments by position (topic, value, key, partition, callback, on_delivery, timestamp): keywords cost it
    about 0.7 µs more a record, 0.35 s of a 500,000 stage's produce work."""
    while not pending.done:
        topic, partition, values, keys = pending.runs[pending.run]
        if partition is None:
            partition = KEYS_PARTITION
        n = len(values)
        i = pending.record
        while i < n:
            stop = min(n, i + SLICE_RECORDS)
            try:
                for i in range(i, stop):  # noqa: B020 -- resumes at the record the full queue refused
                    produce(topic, values[i], keys[i], partition, None, None, timestamp_ms)
                i = stop
            except BufferError:
                poll(0.05)
            if i < n and clock() >= until:
                pending.record = i
                poll(0)
                return
        pending.run, pending.record = pending.run + 1, 0
        poll(0)
        if clock() >= until:
            return
