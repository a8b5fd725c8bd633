"""One lane's dispatch in a turn: each partition offers its due entries, the tenant interleaving chooses
within the budget and the rate limits (a pure policy, `fairness.interleave`), and the chosen are sent through
their partitions' dispatchers."""
from __future__ import annotations

from collections.abc import Iterable

from scheduler.engine.dispatch_handler import Offer
from scheduler.engine.fairness import RateLimits, interleave
from scheduler.engine.metrics import EngineMetrics
from scheduler.engine.task import SchedulerTask


def dispatch(tasks: Iterable[SchedulerTask], lane: bytes, now_ms: int, budget: int, limits: RateLimits,
             metrics: EngineMetrics) -> int:
    """Offer each partition's share of the budget to the tenant interleaving, then send the chosen; returns
    how many were sent."""
    tasks = list(tasks)
    share = max(1, -(-budget // max(1, len(tasks))))
    candidates: list[Offer] = []
    for task in tasks:
        candidates.extend(task.dispatcher.offers(lane, now_ms, share))
    if not candidates:
        return 0
    selection = interleave(candidates, budget, limits, now_ms)
    metrics.selected(lane, now_ms, selection.chosen, selection.held_back)
    for dispatcher, key, raw in selection.chosen:
        dispatcher.send(key, raw, now_ms)
    return len(selection.chosen)
