"""Many CREATEs in flight at once: the client's bulk path (`SchedulerClient.create_many`).

One producer keeps up to `window` commands outstanding and matches the results the
client's reader collects by command id, in batches, so the rate is the engine's and
not one round trip per schedule. Each request goes through what `create` does (tenant
name, schedule id derivation, RATE anchoring, local spec validation); what fails
locally becomes a REJECTED result for that request instead of an exception, so one
bad request never stops the others.
"""
from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from scheduler.control.errors import SchedulerError

if TYPE_CHECKING:
    from scheduler.control.client import SchedulerClient

Record = dict[str, Any]

DEFAULT_WINDOW = 20_000  # outstanding commands: a second or so of the engine's rate, well under the producer's queue
TAKE_WAIT_S = 0.05
# The producer's linger for a bulk load (`SchedulerClient(linger_ms=...)`, `schedules import`): batches ten times
# larger than the client's default 2 ms, so the broker handles fewer produce requests per create
# (bench/import.py: its CPU per create 169 -> 103 us).
BULK_LINGER_MS = 20.0


@dataclass(frozen=True)
class CreateRequest:
    """What `SchedulerClient.create` takes, as one value."""

    tenant: str
    spec: Record
    schedule_id: str | None = None
    idempotency_key: str | None = None


# command_id -> (index, sent at (monotonic), request, schedule_id), in send order
InFlight = dict[str, tuple[int, float, CreateRequest, str]]


def local_rejection(request: CreateRequest, schedule_id: str | None, reason: str, message: str) -> Record:
    """A REJECTED result shaped like a CommandResult, for a request that never reached the engine."""
    return {"command_id": None, "schedule_id": schedule_id or request.schedule_id or "", "tenant": request.tenant,
            "command_type": "CREATE", "status": "REJECTED", "version": None, "next_fires_ms": [],
            "reason": reason, "message": message, "source": "client", "processed_at_ms": None}


def pipelined_creates(client: SchedulerClient, requests: Iterable[CreateRequest], window: int = DEFAULT_WINDOW,
                      timeout_s: float | None = None) -> Iterator[tuple[int, Record]]:
    """(index of the request, its result) as results arrive; every request gets exactly one.

    When no result at all has come for `timeout_s` (the engine is stuck or gone, not merely slower than
    the window), each command sent more than `timeout_s` ago gets a REJECTED result with reason TIMEOUT:
    it may still be applied, and sending the same request again is safe (creates are idempotent by id).
    """
    if window < 1:
        raise ValueError("window must be at least 1")
    pipeline = _Pipeline(client, client.timeout_s if timeout_s is None else timeout_s)
    for index, request in enumerate(requests):
        schedule_id = None
        try:
            schedule_id = client.create_id(request.tenant, request.schedule_id, request.idempotency_key)
            command_id = client.send_create(request.tenant, schedule_id, request.spec, request.idempotency_key)
        except SchedulerError as exc:
            yield index, local_rejection(request, schedule_id, exc.reason, exc.message)
            continue
        pipeline.in_flight[command_id] = (index, time.monotonic(), request, schedule_id)
        if len(pipeline.in_flight) >= window:
            yield from pipeline.settle(window * 3 // 4)
    client.producer.flush(pipeline.timeout_s)
    yield from pipeline.settle(0)


class _Pipeline:
    def __init__(self, client: SchedulerClient, timeout_s: float) -> None:
        self.client = client
        self.timeout_s = timeout_s
        self.in_flight: InFlight = {}
        self.progress_at = time.monotonic()  # when the last result came

    def settle(self, until: int) -> Iterator[tuple[int, Record]]:
        """Hand out results until at most `until` commands are outstanding."""
        while len(self.in_flight) > until:
            found = self.client.take_results(self.in_flight.keys(), TAKE_WAIT_S)
            now = time.monotonic()
            if found:
                self.progress_at = now
            for command_id, result in found.items():
                yield self.in_flight.pop(command_id)[0], result
            if now - self.progress_at > self.timeout_s:
                yield from self._time_out(now)

    def _time_out(self, now: float) -> Iterator[tuple[int, Record]]:
        overdue = []
        for command_id, (_, sent_at, _, _) in self.in_flight.items():
            if now - sent_at <= self.timeout_s:
                break  # sent in order, so the rest are younger
            overdue.append(command_id)
        self.client.forget(overdue)
        for command_id in overdue:
            index, _, request, schedule_id = self.in_flight.pop(command_id)
            yield index, {**local_rejection(request, schedule_id, "TIMEOUT",
                                            f"no result for command {command_id} in time"),
                          "command_id": command_id}
