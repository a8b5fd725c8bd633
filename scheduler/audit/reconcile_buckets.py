"""A reconcile range cut into consecutive time buckets, each classified on its own (pure: no database).

PostgreSQL hashes a join or an aggregate in memory up to `work_mem` and past it splits both sides into
batches written to temporary files; at ten million occurrences the classification spent most of its
time there. Every ledger row of an occurrence carries its scheduled_for, and the ledger is indexed and
partitioned by it, so cutting the range by time gives buckets whose rows are read once each, whose hash
tables fit in memory, and whose cost adds up linearly however long the range. A bucket is sized from an
estimate of the range's rows, taken before the expected set exists (it is routed to its bucket as it is
computed): a poor estimate makes buckets larger or smaller, never wrong.
"""
from __future__ import annotations

from dataclasses import dataclass

TARGET_ROWS = 500_000  # expected occurrences per bucket: its joins and aggregates stay within work_mem


@dataclass(frozen=True, slots=True)
class Buckets:
    """[from_ms, to_ms) as `count` buckets of `width_ms` (the last one ends at to_ms)."""

    from_ms: int
    to_ms: int
    width_ms: int
    count: int

    def index(self, at_ms: int) -> int:
        """The bucket of an instant inside the range."""
        return (at_ms - self.from_ms) // self.width_ms

    def bounds(self, index: int) -> tuple[int, int]:
        start = self.from_ms + index * self.width_ms
        return start, min(start + self.width_ms, self.to_ms)


def plan_buckets(from_ms: int, to_ms: int, estimated_rows: float, target_rows: int = TARGET_ROWS) -> Buckets:
    """Equal-width buckets of about `target_rows` each, if the rows were spread evenly over the range; one
    bucket for a range the target already covers. Buckets are at least a millisecond wide: all the rows of
    one instant are always in one bucket."""
    if from_ms >= to_ms:
        raise ValueError(f"an empty range: [{from_ms}, {to_ms})")
    if target_rows < 1:
        raise ValueError("target_rows must be at least 1")
    span = to_ms - from_ms
    wanted = max(1, min(span, -(-int(max(estimated_rows, 0)) // target_rows)))
    width = -(-span // wanted)
    return Buckets(from_ms, to_ms, width, -(-span // width))
