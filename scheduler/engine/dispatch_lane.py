"""One lane's dispatch in a turn: each partition offers its due entries, the tenant interleaving chooses
within the budget and the rate limits, and the chosen are sent through their tasks' outboxes."""
from __future__ import annotations

from collections.abc import Iterable

from scheduler.engine.fairness import RateLimits, interleave
from scheduler.engine.task import SchedulerTask
from scheduler.engine.timeline_keys import LocalEntry
from scheduler.engine.metrics import EngineMetrics

SCAN_FACTOR = 4  # due entries a partition's scan may pass over (held by max_concurrency) per entry offered
Candidate = tuple[str, tuple[SchedulerTask, bytes, bytes]]  # (tenant, (task, timeline key, packed entry))


def offers(task: SchedulerTask, lane: bytes, now_ms: int, share: int) -> list[Candidate]:
    """Up to `share` due entries of one partition that may go now.

    Only the head of an entry (deadline, overlap policy, tenant) is read to choose; the rest is unpacked
    for the rare late and overlap-guarded ones. A late entry sends its schedule back to its misfire
    policy; guarded ones go through the schedule's overlap policy.
    """
    found: list[Candidate] = []
    late: set[str] = set()
    guarded: dict[str, list[tuple[bytes, LocalEntry]]] = {}
    guarded_raw: dict[bytes, bytes] = {}
    offered, scan_left = 0, share * SCAN_FACTOR
    for key, raw in task.due(lane, now_ms):
        if offered >= share or scan_left == 0:
            break
        scan_left -= 1
        deadline_ms, overlap, tenant = LocalEntry.head(raw)
        if deadline_ms >= now_ms and not task.slots.take(task.txn, tenant):
            continue  # the tenant is at its max_concurrency: the entry waits for a free slot
        offered += 1
        if deadline_ms < now_ms or late or overlap != "ALLOW":
            entry = LocalEntry.unpack(raw)
            if deadline_ms < now_ms:
                late.add(entry.schedule_id)
                continue
            if entry.schedule_id in late:
                continue
            if overlap != "ALLOW":
                guarded.setdefault(entry.schedule_id, []).append((key, entry))
                guarded_raw[key] = raw
                continue
        found.append((tenant, (task, key, raw)))
    for schedule_id in late:
        task.replan_late(schedule_id, now_ms)
    for schedule_id, due in guarded.items():
        if schedule_id not in late:
            found.extend((entry.tenant, (task, key, guarded_raw[key]))
                         for key, entry in task.admit_overlapping(schedule_id, due, now_ms))
    return found


def dispatch(tasks: Iterable[SchedulerTask], lane: bytes, now_ms: int, budget: int, limits: RateLimits,
             metrics: EngineMetrics) -> int:
    """Offer each partition's share of the budget to the tenant interleaving, then send the chosen; returns
    how many were sent."""
    tasks = list(tasks)
    share = max(1, -(-budget // max(1, len(tasks))))
    candidates: list[Candidate] = []
    due_seen: dict[int, int] = {}
    for task in tasks:
        offered = offers(task, lane, now_ms, share)
        due_seen[task.partition] = len(offered)
        candidates.extend(offered)
    if not candidates:
        metrics.selected(lane, now_ms, [], due_seen, {})
        return 0
    selection = interleave(candidates, budget, limits, now_ms)
    metrics.selected(lane, now_ms, selection.chosen, due_seen, selection.held_back)
    for task, key, raw in selection.chosen:
        entry = LocalEntry.unpack(raw)
        task.outbox.append((entry.topic, entry.schedule_id.encode(), entry.occurrence, None))
        task.dispatched(key, entry, now_ms)
    return len(selection.chosen)
