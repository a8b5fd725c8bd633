"""After an assignment the group loop waits for every new partition's first fetch (or its end) before it
runs anything, so a high-priority backlog fetched a moment after the low-priority one keeps its turn."""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from confluent_kafka import KafkaError, TopicPartition

from scheduler.worker.group import GroupLoop
from scheduler.worker.metrics import WorkerMetrics
from scheduler.worker.worker import WorkerOptions

LOW, HIGH = "t.occurrences.low", "t.occurrences.high"


@dataclass
class Record:
    """The parts of a confluent_kafka Message the loop reads."""

    topic_name: str
    offset_value: int
    eof: bool = False

    def topic(self) -> str:
        return self.topic_name

    def partition(self) -> int:
        return 0

    def offset(self) -> int:
        return self.offset_value

    def error(self) -> KafkaError | None:
        return KafkaError(KafkaError._PARTITION_EOF) if self.eof else None


@dataclass
class ScriptedConsumer:
    """Each poll or consume call is one fetch round; round N returns what the script holds for N."""

    rounds: dict[int, list[Record]]
    calls: int = 0
    pending: deque[Record] = field(default_factory=deque)

    def subscribe(self, topics: list[str], on_assign, on_revoke, on_lost) -> None:
        on_assign(self, [TopicPartition(LOW, 0), TopicPartition(HIGH, 0)])

    def _fetch(self) -> None:
        self.calls += 1
        self.pending.extend(self.rounds.get(self.calls, []))

    def poll(self, timeout: float) -> Record | None:
        self._fetch()
        return self.pending.popleft() if self.pending else None

    def consume(self, count: int, timeout: float) -> list[Record]:
        self._fetch()
        return [self.pending.popleft() for _ in range(min(count, len(self.pending)))]

    def assignment(self) -> list[TopicPartition]:
        return [TopicPartition(LOW, 0), TopicPartition(HIGH, 0)]

    def position(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        return partitions  # offsets invalid: nothing fetched, so no lag to report

    def pause(self, partitions: list[TopicPartition]) -> None:
        raise AssertionError("nothing here fills a buffer")

    resume = pause

    def close(self) -> None:
        pass


@dataclass
class StubWorker:
    options: WorkerOptions
    topics: dict[str, str] = field(default_factory=lambda: {HIGH: "high", LOW: "low"})
    priorities: tuple[str, ...] = ("high", "low")
    group_id: str = "g"
    rounds_left: int = 50
    metrics: WorkerMetrics = field(default_factory=WorkerMetrics)

    def stopping(self) -> bool:
        self.rounds_left -= 1
        return self.rounds_left <= 0


class RecordingLoop(GroupLoop):
    """Notes the order of handled records instead of running attempts."""

    def __init__(self, worker: StubWorker, consumer: ScriptedConsumer) -> None:
        super().__init__(worker, consumer)  # type: ignore[arg-type]
        self.order: list[str] = []

    def _handle(self, message: Record) -> None:  # type: ignore[override]
        self.order.append(f"{message.topic().rsplit('.', 1)[1]}-{message.offset()}")


def low_first_then_high() -> dict[int, list[Record]]:
    """The low partition's backlog arrives in the first fetch, the high one's two rounds later."""
    return {1: [Record(LOW, 0), Record(LOW, 1)], 2: [Record(LOW, 2, eof=True)], 3: [Record(HIGH, 0), Record(HIGH, 1)]}


def run(settle_s: float, rounds: dict[int, list[Record]]) -> list[str]:
    loop = RecordingLoop(StubWorker(WorkerOptions(assignment_settle_s=settle_s)), ScriptedConsumer(rounds))
    loop.run()
    return loop.order


def test_a_high_priority_backlog_fetched_after_the_low_one_still_runs_first() -> None:
    assert run(60.0, low_first_then_high()) == ["high-0", "high-1", "low-0", "low-1"]


def test_without_the_settle_the_first_fetched_low_priority_record_would_run_first() -> None:
    assert run(0.0, low_first_then_high())[0] == "low-0"


def test_an_empty_partition_settles_by_its_end_so_work_starts_without_waiting_out_the_cap() -> None:
    rounds = {1: [Record(LOW, 0)], 2: [Record(HIGH, 0, eof=True)]}
    assert run(60.0, rounds) == ["low-0"]
