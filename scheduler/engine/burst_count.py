"""How many strict entries fall due at each instant within the longest staging lead, counted a slice at a time.

The stager looks for bursts to stage by counting every instant's timeline entries within `--stage-max-lead`
(60 s), again every COUNT_EVERY_MS. At the seed's scale that window holds hundreds of thousands of entries
(140,000 at a steady 2,300 a second, 500,000 more before a top-of-the-hour burst), about a microsecond each
to count: counted in one go, it stopped the main loop for up to half a second every two seconds, and the
occurrences due meanwhile waited. So a sweep counts COUNT_SLICE keys between two turns and publishes its
counts when it is through; until then the previous sweep's stand.
"""
from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Generator, Iterable

from scheduler.engine import stage_policy, timeline_keys
from scheduler.engine.partition_store import PartitionStore

COUNT_SLICE = 20_000  # timeline keys a sweep counts between two turns (about 20 ms)


class BurstCounter:
    """Only instants with at least `minimum` entries are published: at the daily average every millisecond of
    the lead has an entry or two (140,000 instants), and looking through them all for a burst, every turn,
    was most of a steady turn's CPU."""

    def __init__(self, minimum: int = 1) -> None:
        self.minimum = minimum
        self.counts: dict[int, int] = {}  # due ms -> strict entries, as of the last complete sweep (>= minimum)
        self.counted_ms: int | None = None  # when that sweep began
        self._sweep: tuple[int, Counter[int], Generator[bytes, None, None]] | None = None

    @property
    def sweeping(self) -> bool:
        return self._sweep is not None

    def step(self, stores: Iterable[PartitionStore], now_ms: int, max_lead_ms: int) -> None:
        """Begin a sweep when the last is COUNT_EVERY_MS old, or count its next slice."""
        if self._sweep is None:
            if self.counted_ms is not None and now_ms - self.counted_ms < stage_policy.COUNT_EVERY_MS:
                return
            self._sweep = (now_ms, Counter(), _keys(list(stores), now_ms, max_lead_ms))
        began, counts, keys = self._sweep
        chunk = list(itertools.islice(keys, COUNT_SLICE))
        counts.update(map(timeline_keys.due_ms_of, chunk))
        if len(chunk) < COUNT_SLICE:
            minimum = self.minimum
            self.counts = {due: n for due, n in counts.items() if n >= minimum}
            self.counted_ms, self._sweep = began, None

    def reset(self) -> None:
        """Partitions moved: the sweep's stores may close, so it ends here (its iterators with it)."""
        if self._sweep is not None:
            self._sweep[2].close()
            self._sweep = None


def _keys(stores: list[PartitionStore], now_ms: int, max_lead_ms: int) -> Generator[bytes, None, None]:
    start = stage_policy.instant_range(now_ms + stage_policy.MARGIN_MS)[1]
    end = stage_policy.instant_range(now_ms + max_lead_ms)[1]
    for store in stores:
        yield from store.keys_from("timeline", start, end)
