"""Many CREATEs in flight at once: the client's bulk path (`SchedulerClient.create_many`).

One producer keeps up to `window` commands outstanding and matches the results the
client's reader collects by command id, in batches, so the rate is the engine's and
not one round trip per schedule. The CREATEs travel as CreateBatch records, one per
partition of the commands topic and up to `BATCH_COMMANDS` each, so the client, the
broker and the engine handle one record per batch instead of one per schedule. Each
request goes through what `create` does (tenant name, schedule id derivation, RATE
anchoring, local spec validation); what fails locally becomes a REJECTED result for
that request instead of an exception, so one bad request never stops the others.
"""
from __future__ import annotations

import time
import uuid
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from scheduler.control.command_record import create_record
from scheduler.control.errors import SchedulerError
from scheduler.wire.codec import RecordCodec
from scheduler.wire.partitioning import partition_for

Record = dict[str, Any]

DEFAULT_WINDOW = 20_000  # outstanding commands: a second or so of the engine's rate, well under the producer's queue
TAKE_WAIT_S = 0.05
# The producer's linger for a bulk load (`SchedulerClient(linger_ms=...)`, `schedules import`): batches ten times
# larger than the client's default 2 ms, so the broker handles fewer produce requests per create
# (bench/import.py: its CPU per create 169 -> 103 us).
BULK_LINGER_MS = 20.0
BATCH_COMMANDS = 500  # CREATEs per CreateBatch
# A batch whose record would be larger is split in two: well under the broker's default message.max.bytes
# (1 MiB) even when one CREATE carries the largest payload the API takes (256 KiB).
MAX_BATCH_BYTES = 512 * 1024
BATCH_AGE_S = 0.05  # open batches are all sent when a request comes this long after their oldest one


@dataclass(frozen=True)
class CreateRequest:
    """What `SchedulerClient.create` takes, as one value."""

    tenant: str
    spec: Record
    schedule_id: str | None = None
    idempotency_key: str | None = None


class CommandChannel(Protocol):
    """What the bulk path needs of a client (`SchedulerClient` is one): ids, the commands topic, and the
    results its reader collects. A narrow contract, so this module need not import the client."""

    @property
    def timeout_s(self) -> float: ...

    @property
    def codec(self) -> RecordCodec: ...


    def create_id(self, tenant: str, schedule_id: str | None, idempotency_key: str | None) -> str: ...

    def expect(self, command_ids: Iterable[str]) -> None: ...

    def produce_command(self, value: bytes, key: bytes, partition: int | None = None) -> None: ...

    def flush_commands(self, timeout_s: float) -> None: ...

    def command_partitions(self) -> int: ...

    def take_results(self, command_ids: Collection[str], wait_s: float) -> dict[str, Record]: ...

    def forget(self, command_ids: Iterable[str]) -> None: ...


# command_id -> (index, sent at (monotonic), request, schedule_id), in send order
InFlight = dict[str, tuple[int, float, CreateRequest, str]]


def local_rejection(request: CreateRequest, schedule_id: str | None, reason: str, message: str) -> Record:
    """A REJECTED result shaped like a CommandResult, for a request that never reached the engine."""
    return {"command_id": None, "schedule_id": schedule_id or request.schedule_id or "", "tenant": request.tenant,
            "command_type": "CREATE", "status": "REJECTED", "version": None, "next_fires_ms": [],
            "reason": reason, "message": message, "source": "client", "processed_at_ms": None}


def pipelined_creates(client: CommandChannel, requests: Iterable[CreateRequest], window: int = DEFAULT_WINDOW,
                      timeout_s: float | None = None) -> Iterator[tuple[int, Record]]:
    """(index of the request, its result) as results arrive; every request gets exactly one.

    When no result at all has come for `timeout_s` (the engine is stuck or gone, not merely slower than
    the window), each command sent more than `timeout_s` ago gets a REJECTED result with reason TIMEOUT:
    it may still be applied, and sending the same request again is safe (creates are idempotent by id).
    """
    if window < 1:
        raise ValueError("window must be at least 1")
    pipeline = _Pipeline(client, client.timeout_s if timeout_s is None else timeout_s)
    batches = CreateBatches(client)
    for index, request in enumerate(requests):
        schedule_id = None
        try:
            schedule_id = client.create_id(request.tenant, request.schedule_id, request.idempotency_key)
            command = create_record(request.tenant, schedule_id, request.spec, request.idempotency_key)
        except SchedulerError as exc:
            yield index, local_rejection(request, schedule_id, exc.reason, exc.message)
            continue
        pipeline.in_flight[command["command_id"]] = (index, time.monotonic(), request, schedule_id)
        batches.add(command)
        if len(pipeline.in_flight) >= window:
            batches.send_all()
            yield from pipeline.settle(window * 3 // 4)
    batches.send_all()
    client.flush_commands(pipeline.timeout_s)
    yield from pipeline.settle(0)


class CreateBatches:
    """CREATEs gathered per partition of the commands topic and produced as CreateBatch records."""

    def __init__(self, client: CommandChannel) -> None:
        self.client = client
        self.partitions = client.command_partitions()
        self.open: dict[int, list[Record]] = {}
        self.oldest = time.monotonic()  # when the first command of the open batches came

    def add(self, command: Record) -> None:
        if not self.open:
            self.oldest = time.monotonic()
        partition = partition_for(command["schedule_id"].encode(), self.partitions)
        batch = self.open.setdefault(partition, [])
        batch.append(command)
        if len(batch) >= BATCH_COMMANDS:
            self._send(partition, self.open.pop(partition))
        elif time.monotonic() - self.oldest > BATCH_AGE_S:
            self.send_all()

    def send_all(self) -> None:
        for partition in list(self.open):
            self._send(partition, self.open.pop(partition))

    def _send(self, partition: int, commands: list[Record]) -> None:
        batch_id = str(uuid.uuid4())
        value = self.client.codec.encode("CreateBatch", {"batch_id": batch_id, "commands": commands})
        if len(value) > MAX_BATCH_BYTES and len(commands) > 1:
            half = len(commands) // 2
            self._send(partition, commands[:half])
            self._send(partition, commands[half:])
            return
        self.client.expect(command["command_id"] for command in commands)
        self.client.produce_command(value, batch_id.encode(), partition)


class _Pipeline:
    def __init__(self, client: CommandChannel, timeout_s: float) -> None:
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
