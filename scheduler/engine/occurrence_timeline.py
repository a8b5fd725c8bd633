"""The partition's timeline of occurrences: planning fires into it (materialize, replan, complete), and
enqueueing one ready-to-send occurrence with its changelog record."""
from __future__ import annotations

import time
from collections.abc import Callable, Iterator

from scheduler.engine import materialize, timeline_keys
from scheduler.engine.attempt_policy import lease_ms
from scheduler.engine.occurrence_events import record_event, record_missed
from scheduler.engine.task_context import TaskContext
from scheduler.engine.timeline_keys import (
    CATCH_UP,
    DISPATCH,
    END,
    NO_DEADLINE,
    WAKE,
    LocalEntry,
)
from scheduler.timing.spec_record import compile_spec
from scheduler.wire.records import (
    Occurrence,
    OccurrenceEventKind,
    ScheduleState,
    TimelineRef,
)

RANKS_KEPT = 100_000
PLANNED_PER_CLOCK_READ = 16  # schedules planned between two looks at the turn's planning deadline
MAX_STRIDE_MS = 60_000


def planning_lead_ms(horizon_ms: int) -> int:
    """How far ahead a schedule's next fire must come before it is planned: the horizon less a stride (half
    the horizon, at most a minute). Each pass then plans through the whole horizon, so a schedule that fires
    more often than the stride has several fires planned per pass, its state read and written once for
    them all instead of once per fire; one that fires less often is planned once per fire, as before."""
    return horizon_ms - min(horizon_ms // 2, MAX_STRIDE_MS)


class Timeline:
    def __init__(self, ctx: TaskContext, horizon_ms: int, floor: Callable[[bytes], bytes]) -> None:
        self.ctx = ctx
        self.horizon_ms = horizon_ms
        self.lead_ms = planning_lead_ms(horizon_ms)
        self._floor = floor  # where a lane's first live key may be (lane_scan.DueScan.floor)
        self._ranks: dict[tuple[bytes, int, str], int] = {}  # (lane, due, tenant) -> next rank given

    # -- one occurrence --------------------------------------------------------------

    def occurrence_record(self, state: ScheduleState, oid: str, scheduled_for_ms: int, available_at_ms: int,
                          attempt: int, dst_rule: str | None, catch_up: bool, version: int) -> Occurrence:
        spec = state["spec"]
        return {"occurrence_id": oid, "schedule_id": state["schedule_id"], "tenant": state["tenant"],
                "schedule_version": version, "scheduled_for_ms": scheduled_for_ms,
                "available_at_ms": available_at_ms, "priority": spec["priority"], "payload": spec["payload"],
                "attempt": attempt, "dst_rule": dst_rule, "catch_up": catch_up, "lease_ms": lease_ms(state)}

    def enqueue(self, state: ScheduleState, oid: str, scheduled_for_ms: int, available_at_ms: int, *, attempt: int,
                dst_rule: str | None, catch_up: bool, version: int | None = None) -> TimelineRef:
        """Put one ready-to-send occurrence in the timeline; returns its ref for the schedule's pending list."""
        ctx = self.ctx
        spec = state["spec"]
        version = state["version"] if version is None else version
        sid, tenant = state["schedule_id"], state["tenant"]
        ctx.tenants_used.add(tenant)
        topic = ctx.tenants.topic("occurrences", tenant, spec["priority"].lower())
        lane = CATCH_UP if catch_up else DISPATCH
        rank_of = (lane, available_at_ms, tenant)
        rank = self._ranks.get(rank_of, 0)
        self._ranks[rank_of] = rank + 1
        key = timeline_keys.occurrence_key(lane, available_at_ms, sid, scheduled_for_ms, rank)
        body = ctx.codec.encode("Occurrence", self.occurrence_record(
            state, oid, scheduled_for_ms, available_at_ms, attempt, dst_rule, catch_up, version))
        deadline = NO_DEADLINE if catch_up else available_at_ms + spec["max_lateness_ms"]
        policy = spec["overlap_policy"]
        ctx.txn.put("timeline", key, LocalEntry(tenant, sid, topic, oid, body, deadline, policy).pack())
        ctx.timeline_changelog[key] = ctx.codec.encode("TimelineEntry", {
            "schedule_id": sid, "tenant": tenant, "schedule_version": version, "occurrence_id": oid,
            "scheduled_for_ms": scheduled_for_ms, "available_at_ms": available_at_ms,
            "deadline_ms": None if catch_up else deadline, "overlap_policy": policy, "topic": topic,
            "lane": "CATCH_UP" if catch_up else "STRICT", "occurrence": body,
        })
        return {"due_ms": available_at_ms, "scheduled_for_ms": scheduled_for_ms, "rank": rank}

    def pending_keys(self, state: ScheduleState) -> Iterator[tuple[TimelineRef, bytes]]:
        sid = state["schedule_id"]
        for ref in state.get("pending") or []:
            key = self._key_of(sid, ref)
            if key is not None:
                yield ref, key

    def _key_of(self, schedule_id: str, ref: TimelineRef) -> bytes | None:
        """The timeline key of a pending ref, in whichever lane it is; None once it is gone. A key below its
        lane's floor in the store is gone without a read (a dispatched entry, the common case); the floor says
        nothing of this turn's own writes, which are looked at first."""
        written = self.ctx.txn.changes["timeline"]
        for lane in (DISPATCH, CATCH_UP):
            key = timeline_keys.occurrence_key(lane, ref["due_ms"], schedule_id, ref["scheduled_for_ms"], ref["rank"])
            if key in written:
                if written[key] is not None:
                    return key
            elif key >= self._floor(lane) and self.ctx.store.get("timeline", key) is not None:
                return key
        return None

    def _kept_refs(self, state: ScheduleState, now_ms: int) -> list[TimelineRef]:
        """The pending refs worth keeping in the state. Only an entry already due can have left the timeline
        (dispatched, or deleted after a stage sent it; a change rewrites the list): a ref due later is kept
        unread. A ref kept too long costs nothing but its bytes, since every reader of the list
        (`pending_keys`) looks each entry up."""
        sid = state["schedule_id"]
        return [ref for ref in state.get("pending") or []
                if ref["due_ms"] > now_ms or self._key_of(sid, ref) is not None]

    def drop_pending(self, state: ScheduleState, kind: OccurrenceEventKind, now_ms: int) -> None:
        """The change wins over the old version's occurrences not yet sent, even those already due (their
        partition was behind or failing over): each is reported, saying which it was."""
        txn = self.ctx.txn
        for ref, key in list(self.pending_keys(state)):
            entry = LocalEntry.unpack(txn.get("timeline", key) or b"")
            txn.delete("timeline", key)
            overdue_ms = now_ms - ref["due_ms"]
            if overdue_ms >= 0:
                # SKIPPED_PAUSED is for fires due while paused; this one was due before the pause.
                reported: OccurrenceEventKind = "INVALIDATED" if kind == "SKIPPED_PAUSED" else kind
                reason = (f"version {state['version']} superseded; due {overdue_ms} ms before the change was "
                          "accepted, not yet dispatched")
            else:
                reported, reason = kind, f"version {state['version']} superseded"
            record_event(self.ctx, state, reported, reason, now_ms, occurrence_id=entry.occurrence_id,
                         scheduled_for_ms=ref["scheduled_for_ms"])

    # -- planning ------------------------------------------------------------------------

    def materialize(self, state: ScheduleState, cursor_ms: int, now_ms: int,
                    recorded_until_ms: int | None = None) -> ScheduleState:
        spec = compile_spec(state["spec"])
        planned = materialize.plan(spec, state["spec"], state["schedule_id"], state["version"], cursor_ms,
                                   state["fired_count"], now_ms, self.horizon_ms, recorded_until_ms)
        if planned.misfire is not None:
            record_missed(self.ctx, state, planned.misfire, "MISSED", "later than max_lateness (misfire policy)",
                          now_ms)
        for skipped in planned.excluded:
            record_event(self.ctx, state, "EXCLUDED", "an EXDATE of the schedule's recurrence rule", now_ms,
                         occurrence_id=skipped.occurrence_id, scheduled_for_ms=skipped.scheduled_for_ms)
        pending = self._kept_refs(state, now_ms)
        for occ in planned.occurrences:
            pending.append(self.enqueue(state, occ.occurrence_id, occ.scheduled_for_ms, occ.available_at_ms,
                                        attempt=1, dst_rule=occ.dst_rule, catch_up=occ.catch_up))
        state = {**state, "pending": pending, "next_fire_ms": planned.next_fire_ms,
                 "fired_count": planned.fired_count}
        self.ctx.save(state)
        return state

    def replan_late(self, schedule_id: str, now_ms: int) -> None:
        """A materialized entry missed its deadline (downtime, overload): its schedule's misfire policy decides.

        The schedule's pending entries are taken back and every fire from the
        oldest of them on is planned again; the occurrence ids are the same, so
        entries that are still on time come back unchanged.
        """
        state = self.ctx.schedule(schedule_id)
        if state is None:
            return
        pending = list(self.pending_keys(state))
        if not pending:
            return
        for _, key in pending:
            self.ctx.txn.delete("timeline", key)
        self.ctx.drop_wake(state)
        cursor_ms = min(ref["scheduled_for_ms"] for ref, _ in pending) - 1
        # The earlier pass recorded EXDATE'd fires up to where it stopped: not again.
        next_fire_ms = state.get("next_fire_ms")
        recorded_until_ms = (next_fire_ms - 1 if next_fire_ms is not None
                             else max(ref["scheduled_for_ms"] for ref, _ in pending))
        state = {**state, "pending": [], "fired_count": state["fired_count"] - len(pending)}
        self.materialize(state, cursor_ms, now_ms, recorded_until_ms)

    def materialize_due(self, now_ms: int, budget: int, deadline: float = float("inf")) -> int:
        """Plan the schedules whose next fire comes within the planning lead, complete those with nothing left;
        at most `budget` of them, and none once `time.perf_counter()` passes `deadline` (the turn's dispatch
        comes first: a fire is planned a lead ahead, so planning can wait a turn)."""
        if len(self._ranks) > RANKS_KEPT:  # ranks only matter while their instant is ahead
            self._ranks = {k: v for k, v in self._ranks.items() if k[1] >= now_ms}
        due = self._wakes_due(WAKE, now_ms + self.lead_ms, budget) + self._wakes_due(END, now_ms, budget)
        for n, key in enumerate(due):
            if n % PLANNED_PER_CLOCK_READ == 0 and n and time.perf_counter() > deadline:
                return n
            self.ctx.txn.delete("timeline", key)
            state = self.ctx.schedule(timeline_keys.wake_schedule_id(key))
            if state is None or timeline_keys.wake_key(state) != key:
                continue
            if state["next_fire_ms"] is None:
                self._complete_if_done(state, now_ms)
                continue
            self.materialize(state, state["next_fire_ms"] - 1, now_ms)
        return len(due)

    def _wakes_due(self, lane: bytes, until_ms: int, budget: int) -> list[bytes]:
        bound = timeline_keys.lane_bound(lane, until_ms)
        due: list[bytes] = []
        for key in self.ctx.store.keys_from("timeline", self._floor(lane), bound):
            if len(due) >= budget:
                break
            if not self.ctx.txn.is_deleted("timeline", key):
                due.append(key)
        return due

    def _complete_if_done(self, state: ScheduleState, now_ms: int) -> None:
        """No fire left: once the last pending occurrence is gone the schedule is COMPLETED and frees its slot."""
        pending = [ref for ref, _ in self.pending_keys(state)]
        if pending:
            self.ctx.save({**state, "pending": pending, "updated_at_ms": now_ms})
            return
        done: ScheduleState = {**state, "state": "COMPLETED", "pending": [], "updated_at_ms": now_ms}
        self.ctx.save(done)
        self.ctx.admission(done, "RELEASE", now_ms)
        self.ctx.publish(done)

    def has_wake_due(self, now_ms: int) -> bool:
        for lane, until_ms in ((WAKE, now_ms + self.lead_ms), (END, now_ms)):
            for _ in self.ctx.store.keys_from("timeline", self._floor(lane), timeline_keys.lane_bound(lane, until_ms)):
                return True
        return False

    def next_wake_ms(self) -> int | None:
        """The earliest fire not yet planned (how far behind its lead planning is)."""
        for key in self.ctx.store.keys_from("timeline", self._floor(WAKE), timeline_keys.lane_end(WAKE)):
            return timeline_keys.due_ms_of(key)
        return None
