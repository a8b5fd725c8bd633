"""Higher priorities first: fetched records wait in one local buffer per priority.

The worker takes the next record from the highest non-empty buffer, refilling the buffers with a
non-blocking poll between occurrences, so a high-priority record fetched while low-priority work
is buffered runs next. A priority whose buffer is full has its partitions paused until it drains,
which bounds memory and leaves the unread records on the broker (uncommitted, so never lost).
Within one partition records keep their order, so committing each record's offset is safe.
"""
from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from typing import Generic, Protocol, TypeVar


class PartitionRecord(Protocol):
    def topic(self) -> str | None: ...

    def partition(self) -> int | None: ...


R = TypeVar("R", bound=PartitionRecord)


class PriorityBuffers(Generic[R]):
    def __init__(self, priorities: Sequence[str], capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1, got {capacity}")
        self.priorities = tuple(priorities)
        self.capacity = capacity
        self._buffers: dict[str, deque[R]] = {p: deque() for p in self.priorities}

    def add(self, priority: str, record: R) -> None:
        self._buffers[priority].append(record)

    def pop_next(self) -> tuple[str, R] | None:
        """The oldest buffered record of the highest priority that has one."""
        for priority in self.priorities:
            buffer = self._buffers[priority]
            if buffer:
                return priority, buffer.popleft()
        return None

    def pending(self) -> int:
        return sum(len(b) for b in self._buffers.values())

    def full(self) -> set[str]:
        """Priorities whose partitions should be paused."""
        return {p for p, b in self._buffers.items() if len(b) >= self.capacity}

    def drop_partitions(self, partitions: Iterable[tuple[str, int]]) -> int:
        """Forget records of partitions this worker lost (their new owner reads them again)."""
        lost = set(partitions)
        dropped = 0
        for priority, buffer in self._buffers.items():
            kept = deque(r for r in buffer if (r.topic(), r.partition()) not in lost)
            dropped += len(buffer) - len(kept)
            self._buffers[priority] = kept
        return dropped
