"""Worker SDK: run a handler per occurrence of a tenant, recording every attempt (docs/workers.md)."""
from scheduler.worker.errors import PermanentError, RetryableError
from scheduler.worker.idempotency import ensure_table, once
from scheduler.worker.occurrence import AttemptContext, Occurrence
from scheduler.worker.worker import Worker, WorkerOptions

__all__ = [
    "AttemptContext",
    "Occurrence",
    "PermanentError",
    "RetryableError",
    "Worker",
    "WorkerOptions",
    "ensure_table",
    "once",
]
