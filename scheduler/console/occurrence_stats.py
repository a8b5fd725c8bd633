"""Per-tenant occurrence figures for the tenants page, kept incrementally from the occurrence-status view.

What the view can tell: how many occurrences are in each state now (queued ones are the tenant's
backlog as its workers see it), and the start lag of recent first attempts (the first STARTED
event minus scheduled_for: it includes the worker's pickup, so it is an upper bound of the
scheduler's own lag, which only the scheduler's metrics hold, per lane and not per tenant).
"""
from __future__ import annotations

import json
from collections import Counter, deque
from dataclasses import dataclass

from scheduler.wire.records import OccurrenceStatus
from scheduler.wire.schemas import schema_dir

SAMPLES = 1000
QUEUED = frozenset({"ENQUEUED", "RETRY_WAIT"})


@dataclass(frozen=True)
class TenantFigures:
    by_state: dict[str, int]
    backlog: int
    start_lag_p99_s: float | None
    samples: int


def p99(values: list[float]) -> float | None:
    """Nearest-rank 99th percentile."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, -(-99 * len(ordered) // 100) - 1)]


def first_start_ms(status: OccurrenceStatus) -> int | None:
    for event in status["attempts"]:
        if event["attempt"] == 1 and event["kind"] == "STARTED":
            return int(event["at_ms"])
    return None


class OccurrenceStats:
    """Not thread-safe (the console's index thread owns it)."""

    def __init__(self) -> None:
        self._held: dict[str, tuple[str, str, bool]] = {}  # occurrence_id -> (tenant, state, lag sampled)
        self._states: dict[str, Counter[str]] = {}
        self._lags: dict[str, deque[float]] = {}

    def apply(self, occurrence_id: str, status: OccurrenceStatus | None) -> None:
        old = self._held.pop(occurrence_id, None)
        if old is not None:
            self._states[old[0]][old[1]] -= 1
        if status is None:
            return
        tenant = status["tenant"]
        started = first_start_ms(status)
        sampled = old is not None and old[2]
        if started is not None and not sampled:
            self._lags.setdefault(tenant, deque(maxlen=SAMPLES)).append(
                max(0, started - status["scheduled_for_ms"]) / 1000)
            sampled = True
        self._held[occurrence_id] = (tenant, status["state"], sampled)
        self._states.setdefault(tenant, Counter())[status["state"]] += 1

    def figures(self, tenant: str) -> TenantFigures:
        states = self._states.get(tenant, Counter())
        lags = list(self._lags.get(tenant, ()))
        by_state = {symbol: states.get(symbol, 0) for symbol in STATES}
        return TenantFigures(by_state, sum(states.get(s, 0) for s in QUEUED), p99(lags), len(lags))


def _states() -> tuple[str, ...]:
    """The OccurrenceState symbols, from the schema (UNKNOWN is only an old reader's fallback)."""
    schema = json.loads((schema_dir() / "OccurrenceStatus.avsc").read_text())
    field = next(f for f in schema["fields"] if f["name"] == "state")
    return tuple(s for s in field["type"]["symbols"] if s != field["type"]["default"])


STATES = _states()
