"""What the consume loops (`group.run_group`, `share.run_share`) need of the worker that runs them: its
identity, settings and outputs, and one attempt at a time. A narrow contract, so the loops need not import
`worker.Worker` (which starts them) and a test can drive them with a stub."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from confluent_kafka import Message

from scheduler.wire.codec import RecordCodec
from scheduler.worker.attempt import Event
from scheduler.worker.metrics import WorkerMetrics
from scheduler.worker.occurrence import Occurrence
from scheduler.worker.writer import AttemptWriter


@dataclass(frozen=True)
class WorkerOptions:
    """Tuning that rarely changes; the defaults suit handlers that finish within minutes."""

    view_catch_up_s: float = 10.0
    buffer_capacity: int = 100
    poll_timeout_s: float = 0.2
    session_timeout_ms: int = 10_000
    max_poll_interval_ms: int = 300_000
    assignment_settle_s: float = 2.0


class ConsumingWorker(Protocol):
    worker_id: str
    group_id: str
    client_config: dict[str, str]
    codec: RecordCodec
    topics: dict[str, str]  # occurrence topic -> its priority
    priorities: tuple[str, ...]
    options: WorkerOptions
    metrics: WorkerMetrics
    writer: AttemptWriter | None  # set while the worker runs

    def stopping(self) -> bool: ...

    def attempt(self, occurrence: Occurrence) -> Event | None:
        """Run one attempt; the outcome event to record (None: nothing to record)."""


def position(message: Message) -> tuple[str, int, int]:
    """A consumed record's topic, partition and offset (the accessors are None only on a Message that did not
    come from a consumer, or on an error event without a partition)."""
    topic, partition, offset = message.topic(), message.partition(), message.offset()
    if topic is None or partition is None or offset is None:
        raise ValueError(f"a consumed record without its position: {topic}[{partition}] offset {offset}")
    return topic, partition, offset
