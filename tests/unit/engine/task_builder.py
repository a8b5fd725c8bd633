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


def outputs(task: SchedulerTask, topic: str, schema: str) -> list[dict]:
    """The decoded records of the open turn's outbox sent to `topic`."""
    return [CODEC.decode(schema, value) for to, _, value, _ in task.ctx.outbox if to == topic]
