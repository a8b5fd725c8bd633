"""What a turn produces: every task's outbox and changelog records, in the turn's transaction."""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from scheduler.engine.stage_layout import TopicLayout
from scheduler.engine.task import SchedulerTask
from scheduler.engine.timeline_keys import WAKE_HEADER
from scheduler.kafka.transactional import TransactionalProducer
from scheduler.wire.partitioning import partition_for


def produce_outputs(producer: TransactionalProducer, tasks: Iterable[SchedulerTask],
                    held: Mapping[str, TopicLayout]) -> dict[int, dict[str, int]]:
    """Produce every task's outbox and changelog; returns the changelog offsets to checkpoint. The topics of
    an open stage (`held`) take their ordinary occurrences on the partitions it left free (stage_layout)."""
    offsets: dict[int, dict[str, int]] = {}
    produce = producer.raw.produce  # the hot path: no callback per record, a failed one fails the commit
    for task in tasks:
        for topic, key, value, partition in task.ctx.outbox:
            if partition is None and held and key is not None:
                layout = held.get(topic)
                if layout is not None:
                    partition = layout.reroute(partition_for(key, layout.partitions))
            if partition is None:
                produce(topic, value, key)
            else:
                produce(topic, value, key, partition=partition)
        task_offsets = offsets.setdefault(task.partition, {})
        for store, records in task.changelog_records().items():
            # Records of one partition are delivered in order: the last one's offset covers them all,
            # and any failed delivery fails the commit anyway.
            def delivered(msg: Any, store: str = store, task_offsets: dict[str, int] = task_offsets) -> None:
                task_offsets[store] = msg.offset() + 1
            wakes = task.ctx.schedule_wakes if store == "schedules" else {}
            *rest, (topic, key, value) = records
            for topic_, key_, value_ in rest:
                produce(topic_, value_, key_, partition=task.partition, headers=_wake_header(wakes, key_))
            producer.produce(topic, value, key, partition=task.partition, on_delivered=delivered,
                             headers=_wake_header(wakes, key))
        producer.raw.poll(0)
    # Undelivered output (e.g. purged when the transaction timed out) fails this turn only: abort it,
    # rewind the inputs and go again; a fenced producer fails the abort.
    producer.flush(30)
    return offsets


def _wake_header(wakes: dict[bytes, bytes], key: bytes) -> list[tuple[str, str | bytes | None]] | None:
    """A schedule record names its wake-up, so restore needs not decode it (scheduler/engine/restore_reader.py)."""
    wake = wakes.get(key)
    return None if wake is None else [(WAKE_HEADER, wake)]
