"""The admission side of a partition: the active-schedule count of the tenants this partition counts for,
the running-slot ledger of those tenants, and the answers that come back to the schedules waiting for them."""
from __future__ import annotations

import logging
from collections.abc import Callable

from scheduler.engine import running_slots
from scheduler.engine.command_policy import admitted, result_record
from scheduler.engine.occurrence_timeline import Timeline
from scheduler.engine.task_context import TaskContext
from scheduler.wire.records import AdmissionRequest, AdmissionResult

log = logging.getLogger(__name__)


class Admissions:
    def __init__(self, ctx: TaskContext, timeline: Timeline, slots: running_slots.RunningSlots,
                 partitions: int) -> None:
        self.ctx = ctx
        self.timeline = timeline
        self.slots = slots
        self.partitions = partitions  # of the schedule topics, for the running-slot ledger

    def on_admission_request(self, key: bytes | None, value: bytes | None, offset: int, now_ms: int) -> None:
        """This partition's share of tenants: count their active schedules and grant or refuse slots."""
        ctx = self.ctx
        request = ctx.decode_input("AdmissionRequest", ctx.topics.admissions, key, value, offset, now_ms)
        if request is None:
            return
        if request["kind"] in ("WANT_RUNNING", "RETURN_RUNNING"):
            self._running_slot_request(request, now_ms)
            return
        answer = self.count(request, now_ms)
        if answer is None:
            return
        if request["schedule_ids"]:
            ctx.emit(ctx.topics.admission_results, "AdmissionResult", answer["tenant"].encode(), answer,
                     request["partition"])
        else:
            ctx.emit(ctx.topics.admission_results, "AdmissionResult", request["schedule_id"].encode(), answer)

    def count(self, request: AdmissionRequest, now_ms: int) -> AdmissionResult | None:
        """A RESERVE or RELEASE against the tenant's active-schedule count; the answer of a RESERVE."""
        ctx = self.ctx
        tenant = request["tenant"]
        count = running_slots.active_count(ctx.txn, tenant)
        if request["kind"] == "RELEASE":
            running_slots.set_active_count(ctx.txn, tenant, max(0, count - 1))
            return None
        many = request["schedule_ids"]
        partition = request["partition"]
        if many and (partition is None or not 0 <= partition < self.partitions):
            log.warning("reservation of %d schedules of %s for partition %s ignored", len(many), tenant, partition)
            return None
        quota = ctx.tenants.max_active_schedules(tenant)
        asked = many or [request["schedule_id"]]
        granted = max(0, min(len(asked), quota - count))  # in their order: the first ones get the slots left
        if granted:
            count += granted
            running_slots.set_active_count(ctx.txn, tenant, count)
        return {"tenant": tenant, "schedule_id": request["schedule_id"], "granted": granted == len(asked),
                "active_schedules": count, "max_active_schedules": quota, "decided_at_ms": now_ms,
                "running_slots": None, "granted_ids": many[:granted], "refused_ids": many[granted:]}

    def send_reservations(self, now_ms: int, local: LocalCounter = lambda tenant: None) -> None:
        """After the turn's inputs: one RESERVE per tenant for every new schedule of this turn (`ctx.reserve`).

        A tenant counted by a partition of this process (`local`) is asked and answers in this turn, in its
        store transaction, which commits with this one: the same decision the records would carry, without the
        round trip, the turn it waits for, or the PENDING states reaching the changelog."""
        ctx = self.ctx
        for tenant, schedule_ids in ctx.reservations.items():
            request: AdmissionRequest = {"tenant": tenant, "schedule_id": "", "kind": "RESERVE",
                                         "requested_at_ms": now_ms, "partition": ctx.partition,
                                         "schedule_ids": schedule_ids}
            counter = local(tenant)
            if counter is None:
                ctx.emit(ctx.topics.admissions, "AdmissionRequest", tenant.encode(), request)
                continue
            answer = counter.count(request, now_ms)
            if answer is not None:
                self.take_answer(answer, now_ms)
        ctx.reservations = {}

    def _running_slot_request(self, request: AdmissionRequest, now_ms: int) -> None:
        """The tenant's running-slot ledger: record the wish or the returned slots, send out what changes."""
        ctx = self.ctx
        tenant, partition = request["tenant"], request["partition"]
        quota = ctx.tenants.max_concurrency(tenant)
        if partition is None or not 0 <= partition < self.partitions:
            log.warning("running-slot request of %s for partition %s ignored", tenant, partition)
            return
        changes = running_slots.ledger_change(ctx.txn, tenant, request["kind"], partition, request["count"],
                                              quota if quota is not None else 2**62, self.partitions)
        for receiver, slots in changes.items():
            ctx.emit(ctx.topics.admission_results, "AdmissionResult", tenant.encode(), {
                "tenant": tenant, "schedule_id": "", "granted": slots > 0, "active_schedules": 0,
                "max_active_schedules": 0, "decided_at_ms": now_ms, "running_slots": slots}, receiver)

    def settle_running_slots(self, now_ms: int) -> None:
        """After dispatch: give idle running slots back, ask for the ones that were missing."""
        ctx = self.ctx
        for message in self.slots.settle(ctx.txn, now_ms):
            ctx.emit(ctx.topics.admissions, "AdmissionRequest", message.tenant.encode(), {
                "tenant": message.tenant, "schedule_id": "", "kind": message.kind, "requested_at_ms": now_ms,
                "partition": ctx.partition, "count": message.count})

    def on_admission_result(self, key: bytes | None, value: bytes | None, offset: int, now_ms: int) -> None:
        ctx = self.ctx
        answer = ctx.decode_input("AdmissionResult", ctx.topics.admission_results, key, value, offset, now_ms)
        if answer is not None:
            self.take_answer(answer, now_ms)

    def take_answer(self, answer: AdmissionResult, now_ms: int) -> None:
        ctx = self.ctx
        if answer["running_slots"] is not None:
            self.slots.granted(ctx.txn, answer["tenant"], answer["running_slots"])
            return
        if not answer["granted_ids"] and not answer["refused_ids"]:
            self._answered(answer["schedule_id"], answer["granted"], answer, now_ms)
            return
        for schedule_id in answer["granted_ids"]:
            self._answered(schedule_id, True, answer, now_ms)
        for schedule_id in answer["refused_ids"]:
            self._answered(schedule_id, False, answer, now_ms)

    def _answered(self, schedule_id: str, granted: bool, answer: AdmissionResult, now_ms: int) -> None:
        """A PENDING schedule's slot granted (it becomes ACTIVE) or refused (it is forgotten); its CREATEs answered."""
        ctx = self.ctx
        key = schedule_id.encode()
        state = ctx.schedule(schedule_id)
        if state is None or state["state"] != "PENDING" or state["tenant"] != answer["tenant"]:
            if granted:  # nobody waits for this slot any more: give it back so the count stays exact
                ctx.admission({"tenant": answer["tenant"], "schedule_id": schedule_id}, "RELEASE", now_ms)
            return
        waiters = state["admission_waiters"]
        base = {"type": "CREATE", "schedule_id": state["schedule_id"], "tenant": state["tenant"]}
        if not granted:
            ctx.txn.delete("schedules", key)
            message = (f"tenant {state['tenant']!r} has {answer['active_schedules']} active schedules, "
                       f"its quota is {answer['max_active_schedules']}")
            for command_id in waiters:
                ctx.result(key, result_record({**base, "command_id": command_id}, "REJECTED", now_ms,
                                              reason="QUOTA", message=message))
            return
        state, cursor_ms = admitted(state, now_ms)
        state = self.timeline.materialize(state, cursor_ms, now_ms)
        ctx.publish(state)
        for command_id in waiters:
            ctx.result(key, result_record({**base, "command_id": command_id}, "ACCEPTED", now_ms,
                                          version=state["version"], next_fires_ms=state["first_next_fires_ms"]))


LocalCounter = Callable[[str], "Admissions | None"]  # tenant -> the admission side counting it, when local
