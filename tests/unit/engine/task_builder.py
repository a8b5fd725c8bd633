"""A scheduler task in memory over a real RocksDB store, with tenant answers a test chooses."""
from __future__ import annotations

from pathlib import Path

from scheduler.engine.partition_store import PartitionStore
from scheduler.engine.task import SchedulerTask
from scheduler.engine.task_context import TaskTopics, TenantPolicy
from scheduler.wire.codec import Codec

CODEC = Codec.default()
TOPICS = TaskTopics("commands", "attempts", "admissions", "admission-results", "results", "events",
                    {"schedules": "s", "timeline": "t", "occurrences": "o", "admissions": "x"})


def tenant_policy(max_active_schedules: int = 100, max_concurrency: int | None = None,
                  registered: bool = True, retry_allowed: bool = True) -> TenantPolicy:
    return TenantPolicy(topic=lambda key, tenant, priority: f"{key}.{tenant}.{priority}",
                        registered=lambda tenant: registered,
                        max_active_schedules=lambda tenant: max_active_schedules,
                        max_concurrency=lambda tenant: max_concurrency,
                        retry_allowed=lambda tenant, now_ms: retry_allowed)


def make_task(path: Path, horizon_ms: int = 120_000, partitions: int = 1, **policy: object) -> SchedulerTask:
    return SchedulerTask(0, PartitionStore(path), TOPICS, CODEC, tenant_policy(**policy), horizon_ms, partitions)


def pending_schedule(schedule_id: str, spec: dict, now_ms: int, tenant: str = "acme") -> dict:
    return {"schedule_id": schedule_id, "tenant": tenant, "version": 1, "state": "PENDING", "spec": spec,
            "idempotency_key": None, "create_command_id": f"create-{schedule_id}", "created_at_ms": now_ms,
            "updated_at_ms": now_ms, "next_fire_ms": None, "fired_count": 0, "pending": [], "running": [],
            "admission_waiters": [f"create-{schedule_id}"], "first_next_fires_ms": []}


def admit_schedule(task: SchedulerTask, schedule_id: str, spec: dict, now_ms: int, tenant: str = "acme",
                   granted: bool = True) -> None:
    """A PENDING schedule in the store, then its tenant's answer arrives (in the open turn)."""
    state = pending_schedule(schedule_id, spec, now_ms, tenant)
    task.store.write({"schedules": {schedule_id.encode(): CODEC.encode("ScheduleState", state)}}, {})
    answer = {"tenant": tenant, "schedule_id": schedule_id, "granted": granted, "active_schedules": 3,
              "max_active_schedules": 3, "decided_at_ms": now_ms, "running_slots": None}
    task.handlers["admission-results"](schedule_id.encode(), CODEC.encode("AdmissionResult", answer), 0, now_ms)


def outputs(task: SchedulerTask, topic: str, schema: str) -> list[dict]:
    """The decoded records of the open turn's outbox sent to `topic`."""
    return [CODEC.decode(schema, value) for to, _, value, _ in task.ctx.outbox if to == topic]
