"""Request and response bodies of the HTTP API, and their mapping to the Avro records.

Every number is bounded to what its Avro field holds (int: 32 bits, long: 64)
and every string to a sane length, so bad input is refused with 422 before it
can reach an encoder. Instants are epoch milliseconds, as on the wire.
"""
from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from scheduler.control.client import SPEC_DEFAULTS, ValidationError
from scheduler.timing.spec_record import MIN_LEASE_MS
from scheduler.wire import records
from scheduler.wire.limits import MAX_NOTE_LENGTH

Record = dict[str, Any]

INT32 = 2**31 - 1
INT64 = 2**63 - 1
MAX_PAYLOAD_BYTES = 256 * 1024
MAX_EXPRESSION = 10_000  # an RRULE's EXDATE list (holidays for years ahead) outgrows a cron line

# Epoch ms within the calendar's years 1..9999 (what datetime, hence the time logic, handles).
Ms = Annotated[int, Field(ge=-62_135_596_800_000, le=253_402_300_799_999)]
SpecKind = records.SpecKindChoice
OverlapPolicy = records.OverlapPolicy
ScheduleId = Annotated[str, Field(min_length=1, max_length=200, pattern=r"^[\x21-\x7e]+$")]
ScheduleStatus = records.ScheduleStatusChoice


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SpecPatch(_Strict):
    """Schedule spec fields; in a PATCH only those given change."""

    kind: SpecKind | None = None
    expression: Annotated[str, Field(min_length=1, max_length=MAX_EXPRESSION)] | None = None
    time_zone: Annotated[str, Field(min_length=1, max_length=100)] | None = None
    anchor_at_ms: Ms | None = None
    start_at_ms: Ms | None = None
    end_at_ms: Ms | None = None
    max_fires: Annotated[int, Field(ge=1, le=INT64)] | None = None
    dst_gap: records.DstGapPolicy | None = None
    dst_overlap: records.DstOverlapPolicy | None = None
    month_end: records.MonthEndPolicy | None = None
    priority: records.Priority | None = None
    flexible_window_ms: Annotated[int, Field(ge=0, le=2**40)] | None = None
    misfire_policy: records.MisfirePolicy | None = None
    catch_up_limit: Annotated[int, Field(ge=0, le=100_000)] | None = None
    max_lateness_ms: Annotated[int, Field(ge=0, le=2**40)] | None = None
    overlap_policy: OverlapPolicy | None = None
    payload: Annotated[str, Field(max_length=MAX_PAYLOAD_BYTES)] | None = Field(
        None, description="payload as UTF-8 text")
    payload_base64: Annotated[str, Field(max_length=MAX_PAYLOAD_BYTES * 4 // 3 + 4)] | None = Field(
        None, description="payload as base64 (binary payloads); exclusive with `payload`")
    max_attempts: Annotated[int, Field(ge=1, le=1000)] | None = None
    retry_backoff_ms: Annotated[int, Field(ge=0, le=2**40)] | None = None
    run_timeout_ms: Annotated[int, Field(ge=1, le=2**40)] | None = None
    occurrence_deadline_ms: Annotated[int, Field(ge=1, le=2**40)] | None = None
    lease_ms: Annotated[int, Field(ge=MIN_LEASE_MS, le=2**40)] | None = Field(
        None, description="how long a running attempt holds its occurrence without a heartbeat")

    def fields(self) -> Record:
        """The given fields as ScheduleSpec record fields (payload as bytes)."""
        given = self.model_dump(exclude_none=True)
        text, b64 = given.pop("payload", None), given.pop("payload_base64", None)
        if text is not None and b64 is not None:
            raise ValidationError("INVALID_SPEC", "payload: give `payload` or `payload_base64`, not both")
        if text is not None:
            given["payload"] = text.encode("utf-8")
        elif b64 is not None:
            try:
                given["payload"] = base64.b64decode(b64, validate=True)
            except (binascii.Error, ValueError) as exc:
                raise ValidationError("INVALID_SPEC", f"payload_base64: {exc}") from exc
        if len(given.get("payload", b"")) > MAX_PAYLOAD_BYTES:
            raise ValidationError("INVALID_SPEC", f"payload: at most {MAX_PAYLOAD_BYTES} bytes")
        return given


class SpecIn(SpecPatch):
    """A full schedule spec: kind and expression are required, the rest has defaults."""

    kind: SpecKind
    expression: Annotated[str, Field(min_length=1, max_length=MAX_EXPRESSION)]

    def record(self) -> Record:
        return {**SPEC_DEFAULTS, **self.fields()}


class CreateIn(_Strict):
    schedule_id: ScheduleId | None = Field(
        None, description="chosen id; default: derived from the Idempotency-Key (or random)")
    spec: SpecIn


class UpdateIn(_Strict):
    spec: SpecIn
    expected_version: Annotated[int, Field(ge=1, le=INT64)] | None = None


class PatchIn(_Strict):
    spec: SpecPatch
    expected_version: Annotated[int, Field(ge=1, le=INT64)] | None = None


class BackfillIn(_Strict):
    from_ms: Ms
    to_ms: Ms
    overlap_override: OverlapPolicy | None = None


class TriggerIn(_Strict):
    overlap_override: OverlapPolicy | None = Field(
        None, description="this occurrence's overlap policy instead of the schedule's (ALLOW: run it although "
                          "one still runs)")


class PauseIn(_Strict):
    note: Annotated[str, Field(max_length=MAX_NOTE_LENGTH)] | None = Field(
        None, description="why the schedule is paused; kept on it (`pause_note`) until it is resumed")


class PreviewIn(_Strict):
    spec: SpecIn
    count: Annotated[int, Field(ge=0, le=1000)] = 10
    after_ms: Ms | None = None


class Quotas(_Strict):
    max_active_schedules: Annotated[int, Field(ge=0, le=INT32)] | None = None
    trigger_rate_per_s: Annotated[float, Field(ge=1e-3, le=INT32)] | None = None
    max_concurrency: Annotated[int, Field(ge=1, le=INT32)] | None = None
    catch_up_rate_per_s: Annotated[float, Field(ge=1e-3, le=INT32)] | None = None
    retry_budget_per_min: Annotated[int, Field(ge=0, le=INT32)] | None = None


class TenantIn(Quotas):
    tenant: Annotated[str, Field(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9._-]+$")]


class KeyIn(_Strict):
    tenant: str | None = Field(None, description="the tenant the key acts for")
    admin: bool = Field(False, description="an admin key instead (no tenant)")


class Error(BaseModel):
    code: str
    message: str


def schedule_json(state: Mapping[str, Any]) -> Record:
    """A ScheduleState for JSON: the payload as text when it is UTF-8, always as base64."""
    spec = dict(state["spec"])
    payload: bytes = spec.pop("payload")
    try:
        spec["payload"] = payload.decode("utf-8")
    except UnicodeDecodeError:
        spec["payload"] = None
    spec["payload_base64"] = base64.b64encode(payload).decode()
    return {**state, "spec": spec}


def result_json(result: Record) -> Record:
    keys = ("command_id", "schedule_id", "command_type", "status", "version", "next_fires_ms", "processed_at_ms")
    return {key: result[key] for key in keys}

