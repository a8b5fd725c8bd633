"""Attempts of the partition's occurrences: the workers' events, the leases that expire without a heartbeat,
retries through the timeline, and dead letters after the last attempt (the policy is `attempts.apply_attempt`)."""
from __future__ import annotations

import logging

from scheduler.engine import leases, overlap
from scheduler.engine.attempt_policy import apply_attempt, lease_ms
from scheduler.engine.occurrence_timeline import Timeline
from scheduler.engine.running_slots import RunningSlots
from scheduler.engine.task_context import TaskContext
from scheduler.wire.records import (
    AttemptEvent,
    OccurrenceStatus,
    RunningRef,
    ScheduleState,
)

log = logging.getLogger(__name__)

LOST_KEPT = 20  # lost attempts a schedule's view names, for the workers that may still run them


class Attempts:
    def __init__(self, ctx: TaskContext, timeline: Timeline, slots: RunningSlots) -> None:
        self.ctx = ctx
        self.timeline = timeline
        self.slots = slots
        self._leases_from_ms: int | None = None  # this task's first lease check

    def on_attempt(self, key: bytes | None, value: bytes | None, offset: int, now_ms: int) -> None:
        event = self.ctx.decode_input("AttemptEvent", self.ctx.topics.attempts, key, value, offset, now_ms)
        if event is None:
            return
        if event["kind"] == "LOST":  # the scheduler's own verdict, never a worker's
            log.warning("ignored a LOST attempt event from worker %s", event["worker_id"])
            return
        self._apply(event, self.ctx.status(event["occurrence_id"]), now_ms)

    def expire_leases(self, now_ms: int, budget: int = 1000) -> None:
        """Record LOST for the attempts whose lease expired, which retries them (scheduler.engine.leases)."""
        ctx = self.ctx
        if self._leases_from_ms is None:
            self._leases_from_ms = now_ms
        for expires_ms, oid in leases.expired(ctx.txn, now_ms, budget):
            status = ctx.status(oid)
            if status is None or status["state"] != "RUNNING" or status.get("lease_expires_at_ms") != expires_ms:
                leases.move(ctx.txn, oid, expires_ms, None)  # left behind by a state this index missed
                continue
            lease = lease_ms(ctx.schedule(status["schedule_id"]))
            if self._leases_from_ms + lease > now_ms:  # inherited: one full lease of this task's own first
                renewed = self._leases_from_ms + lease
                leases.move(ctx.txn, oid, expires_ms, renewed)
                ctx.put_status({**status, "lease_expires_at_ms": renewed})
                continue
            log.info("occurrence %s attempt %d lost its lease (%d ms without a heartbeat)", oid,
                     status["attempt"], lease)
            self._apply(leases.lost_event(status, now_ms, lease), status, now_ms)

    def has_expired_lease(self, now_ms: int) -> bool:
        return leases.has_expired(self.ctx.txn, now_ms)

    def _apply(self, event: AttemptEvent, status: OccurrenceStatus | None, now_ms: int) -> None:
        ctx = self.ctx
        schedule = ctx.schedule(event["schedule_id"])
        if schedule is not None and schedule["tenant"] != event["tenant"]:
            schedule = None
        outcome = apply_attempt(event, status, schedule, now_ms,
                                retry_budget_left=ctx.tenants.retry_allowed(event["tenant"], now_ms))
        if outcome.status is None:
            log.debug("ignored attempt event for %s: %s", event["occurrence_id"], outcome.ignored_reason)
            return
        leases.move(ctx.txn, event["occurrence_id"], status.get("lease_expires_at_ms") if status else None,
                    outcome.status.get("lease_expires_at_ms"))
        ctx.put_status(outcome.status)
        if outcome.finished:
            self.slots.finished(ctx.txn, event["tenant"], event["occurrence_id"])
        elif schedule is not None and event["kind"] in ("STARTED", "HEARTBEAT"):
            self.slots.refreshed(ctx.txn, event["tenant"], event["occurrence_id"],
                                 now_ms + schedule["spec"]["run_timeout_ms"])
        if schedule is None:
            return
        before = schedule
        if outcome.finished or event["kind"] in ("STARTED", "HEARTBEAT"):
            schedule = _track_running(schedule, event, outcome.finished, now_ms)
        if outcome.retry_at_ms is not None:
            ref = self.timeline.enqueue(schedule, event["occurrence_id"], event["scheduled_for_ms"],
                                        outcome.retry_at_ms, attempt=event["attempt"] + 1, dst_rule=None,
                                        catch_up=False)
            schedule = {**schedule, "pending": [*schedule["pending"], ref]}
        if outcome.dead_reason is not None:
            self._dead_letter(schedule, outcome.status, outcome.dead_reason, now_ms)
        if outcome.lost is not None:
            schedule = {**schedule, "lost_attempts": [*schedule.get("lost_attempts", []), outcome.lost][-LOST_KEPT:]}
            ctx.publish(schedule)  # the worker holding the attempt follows the tenant's view
        if schedule is not before:
            ctx.save(schedule)

    def _dead_letter(self, schedule: ScheduleState, status: OccurrenceStatus, reason: str, now_ms: int) -> None:
        occurrence = self.timeline.occurrence_record(schedule, status["occurrence_id"], status["scheduled_for_ms"],
                                                     status["scheduled_for_ms"], status["attempt"], None, False,
                                                     status["schedule_version"])
        self.ctx.emit_to_tenant("dead-letters", schedule["tenant"], "DeadLetter", schedule["schedule_id"].encode(), {
            "occurrence": occurrence, "history": status["attempts"], "reason": reason, "dead_at_ms": now_ms})
        self.ctx.dead_letters[schedule["tenant"]] += 1


def _track_running(schedule: ScheduleState, event: AttemptEvent, finished: bool, now_ms: int) -> ScheduleState:
    """The schedule's running list, which its overlap policy is decided against."""
    if schedule["spec"]["overlap_policy"] == overlap.ALLOW:
        return schedule
    others = [r for r in schedule["running"] if r["occurrence_id"] != event["occurrence_id"]]
    if finished:
        return {**schedule, "running": others}
    mine: RunningRef = {"occurrence_id": event["occurrence_id"], "attempt_token": event["attempt_token"],
                        "since_ms": now_ms}
    return {**schedule, "running": [*others, mine]}
