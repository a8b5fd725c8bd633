"""`scheduler schedules import FILE`: many schedules from JSON Lines through the client's bulk path.

A line is one JSON object in the HTTP API's create shape plus its tenant:
``{"tenant": "acme", "schedule_id": "...", "idempotency_key": "...", "spec": {"kind": "CRON", ...}}``
(`schedule_id` and `idempotency_key` optional; `spec` as `SpecIn` of scheduler.api.models).
Re-importing a file creates nothing new: a line without an idempotency key gets one derived from its
content, so its schedule id (derived as `create` derives it) and key are the same on every import,
and the engine answers a repeated CREATE with the first one's result. Every line gets one outcome;
a bad line is reported with its number and reason and the others still go in.
"""
from __future__ import annotations

import hashlib
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Annotated, Any

from pydantic import Field
from pydantic import ValidationError as PydanticError

from scheduler.api.models import CreateIn
from scheduler.control.bulk import DEFAULT_WINDOW, CreateRequest
from scheduler.control.client import SchedulerClient
from scheduler.control.errors import SchedulerError, ValidationError

Record = dict[str, Any]

DUPLICATE = "DUPLICATE"  # a line naming the same schedule as an earlier line of the file: not sent
KEY_PREFIX = "import:"


class ImportLine(CreateIn):
    tenant: Annotated[str, Field(min_length=1, max_length=100)]
    idempotency_key: Annotated[str, Field(min_length=1, max_length=200)] | None = None


@dataclass(frozen=True)
class Rejection:
    line: int
    reason: str
    message: str
    tenant: str | None = None
    schedule_id: str | None = None


@dataclass
class ImportSummary:
    lines: int = 0
    created: int = 0           # ACCEPTED, the schedule new with this import
    already_existed: int = 0   # ACCEPTED as the repeat of a create done before this import started
    rejections: list[Rejection] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def rejected(self) -> Counter[str]:
        return Counter(r.reason for r in self.rejections)

    @property
    def accepted_per_s(self) -> float:
        return (self.created + self.already_existed) / self.seconds if self.seconds else 0.0

    def as_json(self) -> Record:
        return {"lines": self.lines, "created": self.created, "already_existed": self.already_existed,
                "rejected": dict(self.rejected), "seconds": round(self.seconds, 3),
                "accepted_per_s": round(self.accepted_per_s, 1),
                "rejections": [vars(r) for r in sorted(self.rejections, key=lambda r: r.line)]}


def parse_line(text: str) -> CreateRequest:
    """One line as a create request; a line the model refuses raises SchedulerError saying which field."""
    try:
        line = ImportLine.model_validate_json(text)
    except PydanticError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "line"
        reason = "INVALID_SPEC" if first["loc"][:1] == ("spec",) else "MALFORMED_RECORD"
        raise ValidationError(reason, f"{where}: {first['msg']}") from exc
    key = line.idempotency_key or KEY_PREFIX + hashlib.blake2b(
        line.model_dump_json().encode(), digest_size=16).hexdigest()
    return CreateRequest(line.tenant, line.spec.record(), line.schedule_id, key)


def read_requests(lines: Iterable[str], summary: ImportSummary,
                  numbers: list[int]) -> Iterator[CreateRequest]:
    """The requests of the good lines, in file order; bad and duplicate lines go to `summary` at once.

    `numbers[i]` is the line number of the i-th request yielded (blank lines are skipped, not counted)."""
    seen: dict[str, int] = {}
    for number, text in enumerate(lines, 1):
        if not text.strip():
            continue
        summary.lines += 1
        try:
            request = parse_line(text)
            schedule_id = SchedulerClient.create_id(request.tenant, request.schedule_id, request.idempotency_key)
        except SchedulerError as exc:
            summary.rejections.append(Rejection(number, exc.reason, exc.message))
            continue
        first = seen.setdefault(f"{request.tenant}/{schedule_id}", number)
        if first != number:
            summary.rejections.append(Rejection(number, DUPLICATE, f"the same schedule as line {first}",
                                                request.tenant, schedule_id))
            continue
        numbers.append(number)
        yield CreateRequest(request.tenant, request.spec, schedule_id, request.idempotency_key)


def import_lines(client: SchedulerClient, lines: Iterable[str], window: int = DEFAULT_WINDOW) -> ImportSummary:
    """Send every good line's CREATE, many in flight; the summary holds each line's outcome."""
    summary = ImportSummary()
    numbers: list[int] = []
    started_ms = int(time.time() * 1000)
    started = time.monotonic()
    for index, result in client.create_stream(read_requests(lines, summary, numbers), window):
        if result["status"] == "ACCEPTED":
            # The engine answers a repeated create with the first one's result, processed before we began.
            if result["processed_at_ms"] is not None and result["processed_at_ms"] < started_ms:
                summary.already_existed += 1
            else:
                summary.created += 1
        else:
            summary.rejections.append(Rejection(numbers[index], result["reason"] or "UNKNOWN",
                                                result["message"] or "", result["tenant"] or None,
                                                result["schedule_id"] or None))
    summary.seconds = time.monotonic() - started
    return summary


def summary_text(summary: ImportSummary) -> str:
    rows = [f"line {r.line}: REJECTED {r.reason}: {r.message}" + (f" (schedule {r.schedule_id})"
                                                                   if r.schedule_id else "")
            for r in sorted(summary.rejections, key=lambda r: r.line)]
    rejected = ", ".join(f"{reason} {n}" for reason, n in sorted(summary.rejected.items())) or "none"
    rows.append(f"{summary.lines} lines: {summary.created} created, {summary.already_existed} already existed, "
                f"{len(summary.rejections)} rejected ({rejected}) in {summary.seconds:.1f}s "
                f"({summary.accepted_per_s:,.0f} accepted/s)")
    return "\n".join(rows)
