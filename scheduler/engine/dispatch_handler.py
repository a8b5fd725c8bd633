"""One partition's side of dispatch: which due entries it offers the tenant interleaving, and sending the
chosen ones. A late entry sends its schedule back to its misfire policy; an overlap-guarded one goes through
its schedule's overlap policy; a tenant at its max_concurrency keeps its entries due."""
from __future__ import annotations

from scheduler.engine import overlap
from scheduler.engine.lane_scan import DueScan
from scheduler.engine.occurrence_events import record_event
from scheduler.engine.occurrence_timeline import Timeline
from scheduler.engine.running_slots import RunningSlots
from scheduler.engine.timeline_keys import LocalEntry, scheduled_for_ms_of
from scheduler.wire.records import RunningRef

SCAN_FACTOR = 4  # due entries a partition's scan may pass over (held by max_concurrency) per entry offered
Offer = tuple[str, tuple["Dispatcher", bytes, bytes]]  # (tenant, (dispatcher, timeline key, packed entry))
Due = tuple[bytes, LocalEntry]


class Dispatcher:
    def __init__(self, timeline: Timeline, scan: DueScan, slots: RunningSlots) -> None:
        self.ctx = timeline.ctx
        self.timeline = timeline
        self.scan = scan
        self.slots = slots

    @property
    def partition(self) -> int:
        return self.ctx.partition

    def offers(self, lane: bytes, now_ms: int, share: int) -> list[Offer]:
        """Up to `share` due entries that may go now. Only the head of an entry (deadline, overlap policy,
        tenant) is read to choose; the rest is unpacked for the rare late and overlap-guarded ones."""
        found: list[Offer] = []
        late: set[str] = set()
        guarded: dict[str, list[Due]] = {}
        guarded_raw: dict[bytes, bytes] = {}
        offered, scan_left = 0, share * SCAN_FACTOR
        txn, take = self.ctx.txn, self.slots.take
        for key, raw in self.scan.due(lane, now_ms):
            if offered >= share or scan_left == 0:
                break
            scan_left -= 1
            deadline_ms, overlap_policy, tenant = LocalEntry.head(raw)
            if deadline_ms >= now_ms and not take(txn, tenant):
                continue  # the tenant is at its max_concurrency: the entry waits for a free slot
            offered += 1
            if deadline_ms < now_ms or late or overlap_policy != overlap.ALLOW:
                entry = LocalEntry.unpack(raw)
                if deadline_ms < now_ms:
                    late.add(entry.schedule_id)
                    continue
                if entry.schedule_id in late:
                    continue
                if overlap_policy != overlap.ALLOW:
                    guarded.setdefault(entry.schedule_id, []).append((key, entry))
                    guarded_raw[key] = raw
                    continue
            found.append((tenant, (self, key, raw)))
        for schedule_id in late:
            self.timeline.replan_late(schedule_id, now_ms)
        for schedule_id, due in guarded.items():
            if schedule_id not in late:
                found.extend((entry.tenant, (self, key, guarded_raw[key]))
                             for key, entry in self._admit_overlapping(schedule_id, due, now_ms))
        return found

    def _admit_overlapping(self, schedule_id: str, due: list[Due], now_ms: int) -> list[Due]:
        """Apply the schedule's overlap policy to its due entries; returns those that may be sent now."""
        ctx = self.ctx
        state = ctx.schedule(schedule_id)
        if state is None:
            return due
        spec = state["spec"]
        running = overlap.live_running(state["running"], spec["run_timeout_ms"], now_ms)
        if len(running) != len(state["running"]):
            state = {**state, "running": running}
            ctx.save(state)
        admission = overlap.admit(spec["overlap_policy"], bool(running), due)
        for key, entry in admission.skip:
            ctx.txn.delete("timeline", key)
            record_event(ctx, state, "SKIPPED_OVERLAP", "a previous occurrence was still running", now_ms,
                         occurrence_id=entry.occurrence_id, scheduled_for_ms=scheduled_for_ms_of(key))
        return admission.send

    def send(self, key: bytes, raw: bytes, now_ms: int) -> None:
        """The interleaving chose this entry: produce its occurrence in this turn and take it off the timeline."""
        ctx = self.ctx
        entry = LocalEntry.unpack(raw)
        ctx.outbox.append((entry.topic, entry.schedule_id.encode(), entry.occurrence, None))
        ctx.txn.delete("timeline", key)
        limited = self.slots.is_limited(entry.tenant)
        if entry.overlap == overlap.ALLOW and not limited:
            return
        state = ctx.schedule(entry.schedule_id)
        if state is None:
            return
        if limited:
            self.slots.dispatched(ctx.txn, entry.tenant, entry.occurrence_id, now_ms + state["spec"]["run_timeout_ms"])
        if entry.overlap != overlap.ALLOW:
            mine: RunningRef = {"occurrence_id": entry.occurrence_id, "attempt_token": None, "since_ms": now_ms}
            ctx.save({**state, "running": [*state["running"], mine]})
