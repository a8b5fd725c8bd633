"""Static types of the records in `schemas/*.avsc` (GENERATED: do not edit by hand).

Regenerate with `python -m scheduler.wire.typegen` after changing a schema; the unit test
`tests/unit/wire/test_typegen.py` fails while this file is out of date. The records stay the plain
dicts the Avro decoder returns: these types cost nothing at run time.
"""
from __future__ import annotations

from typing import Literal, NotRequired, TypedDict

# Admission verbs.
AdmissionKind = Literal["RESERVE", "RELEASE", "UNKNOWN", "WANT_RUNNING", "RETURN_RUNNING"]
AdmissionKindChoice = Literal["RESERVE", "RELEASE", "WANT_RUNNING", "RETURN_RUNNING"]


# Attempt steps.
AttemptKind = Literal["STARTED", "SUCCEEDED", "FAILED", "SKIPPED_STALE", "HEARTBEAT", "UNKNOWN", "LOST"]
AttemptKindChoice = Literal["STARTED", "SUCCEEDED", "FAILED", "SKIPPED_STALE", "HEARTBEAT", "LOST"]


# Command outcome.
CommandStatus = Literal["ACCEPTED", "REJECTED", "UNKNOWN"]
CommandStatusChoice = Literal["ACCEPTED", "REJECTED"]


# Command verbs.
CommandType = Literal["CREATE", "UPDATE", "PAUSE", "RESUME", "CANCEL", "TRIGGER", "RERUN", "BACKFILL", "UNKNOWN"]
CommandTypeChoice = Literal["CREATE", "UPDATE", "PAUSE", "RESUME", "CANCEL", "TRIGGER", "RERUN", "BACKFILL"]


# Handling of non-existent local times.
DstGapPolicy = Literal["SKIP", "SHIFT"]


# Handling of ambiguous local times.
DstOverlapPolicy = Literal["FIRST", "LAST", "BOTH"]


# Dispatch lanes.
Lane = Literal["STRICT", "CATCH_UP"]


# Handling of fires missed while the scheduler was down.
MisfirePolicy = Literal["SKIP", "FIRE_ONCE", "CATCH_UP"]


# Handling of day-of-month values past the month's end.
MonthEndPolicy = Literal["SKIP", "CLAMP"]


# Reasons an occurrence was not sent.
OccurrenceEventKind = Literal[
    "MISSED",
    "SKIPPED_PAUSED",
    "INVALIDATED",
    "SKIPPED_OVERLAP",
    "CANCELED",
    "REJECTED_INPUT",
    "UNKNOWN",
    "EXCLUDED",
]
OccurrenceEventKindChoice = Literal[
    "MISSED",
    "SKIPPED_PAUSED",
    "INVALIDATED",
    "SKIPPED_OVERLAP",
    "CANCELED",
    "REJECTED_INPUT",
    "EXCLUDED",
]


# Occurrence life-cycle states.
OccurrenceState = Literal[
    "SCHEDULED",
    "ENQUEUED",
    "RUNNING",
    "SUCCEEDED",
    "RETRY_WAIT",
    "DEAD",
    "MISSED",
    "CANCELED",
    "SKIPPED_OVERLAP",
    "UNKNOWN",
]
OccurrenceStateChoice = Literal[
    "SCHEDULED",
    "ENQUEUED",
    "RUNNING",
    "SUCCEEDED",
    "RETRY_WAIT",
    "DEAD",
    "MISSED",
    "CANCELED",
    "SKIPPED_OVERLAP",
]


# Handling of overlapping runs.
OverlapPolicy = Literal["ALLOW", "SKIP_IF_RUNNING", "QUEUE_ONE"]


# Dispatch priority of a schedule's occurrences; selects the tenant topic <prefix>.occurrences.<tenant>.<priority>
# (lower-case symbol). Unknown future symbols read as NORMAL.
Priority = Literal["HIGH", "NORMAL", "LOW"]


# Rejection codes.
RejectReason = Literal[
    "INVALID_SPEC",
    "UNKNOWN_ZONE",
    "UNKNOWN_SCHEDULE",
    "VERSION_CONFLICT",
    "QUOTA",
    "MALFORMED_RECORD",
    "ALREADY_EXISTS",
    "INVALID_STATE",
    "UNKNOWN_OCCURRENCE",
    "UNKNOWN",
    "UNKNOWN_TENANT",
]
RejectReasonChoice = Literal[
    "INVALID_SPEC",
    "UNKNOWN_ZONE",
    "UNKNOWN_SCHEDULE",
    "VERSION_CONFLICT",
    "QUOTA",
    "MALFORMED_RECORD",
    "ALREADY_EXISTS",
    "INVALID_STATE",
    "UNKNOWN_OCCURRENCE",
    "UNKNOWN_TENANT",
]


# Schedule lifecycle states.
ScheduleStatus = Literal["ACTIVE", "PAUSED", "CANCELED", "COMPLETED", "PENDING", "UNKNOWN"]
ScheduleStatusChoice = Literal["ACTIVE", "PAUSED", "CANCELED", "COMPLETED", "PENDING"]


# Kind of time expression.
SpecKind = Literal["ONCE", "CRON", "RATE", "UNKNOWN", "RRULE"]
SpecKindChoice = Literal["ONCE", "CRON", "RATE", "RRULE"]


class AdmissionRequest(TypedDict):
    """Internal: a schedule task asks its tenant's admission task (on <prefix>.admissions keyed by tenant) for a slot
    of the tenant's max_active_schedules quota (one schedule, or many of one partition at once) or for running
    slots of its max_concurrency quota, or gives them back. All of a tenant's requests meet in one partition, so
    the counts are exact.
    """

    tenant: str
    schedule_id: str
    kind: AdmissionKind
    requested_at_ms: int
    partition: NotRequired[int | None]
    count: NotRequired[int]
    schedule_ids: NotRequired[list[str]]


class AdmissionResult(TypedDict):
    """Internal: the admission task's answer to a RESERVE, on <prefix>.admission-results keyed by schedule_id
    (co-partitioned with the commands); to a RESERVE of many (granted_ids and refused_ids set, schedule_id empty,
    sent to the asking partition, keyed by tenant); or a change of a schedule partition's running slots
    (running_slots set, schedule_id empty, sent to that partition, keyed by tenant).
    """

    tenant: str
    schedule_id: str
    granted: bool
    active_schedules: int
    max_active_schedules: int
    decided_at_ms: int
    running_slots: NotRequired[int | None]
    granted_ids: NotRequired[list[str]]
    refused_ids: NotRequired[list[str]]


class ApiKey(TypedDict):
    """An API key of the HTTP API, on the compacted <prefix>.api-keys topic keyed by key_id; a tombstone revokes it.
    Only a hash of the secret is stored.
    """

    key_id: str
    tenant: NotRequired[str | None]
    sha256: str
    created_at_ms: int


class AttemptEvent(TypedDict):
    """One step of one attempt to run an occurrence, on <prefix>.attempts keyed by schedule_id (so the schedule's
    stream task sees it).
    """

    occurrence_id: str
    schedule_id: str
    tenant: str
    schedule_version: int
    scheduled_for_ms: int
    attempt: int
    attempt_token: str
    kind: AttemptKind
    retryable: NotRequired[bool]
    error_class: NotRequired[str | None]
    error_message: NotRequired[str | None]
    worker_id: NotRequired[str | None]
    at_ms: int
    progress: NotRequired[str | None]


class Command(TypedDict):
    """A request to change a schedule, on <prefix>.commands keyed by schedule_id (a public interface: any producer
    may write it). Each command gets exactly one CommandResult.
    """

    command_id: str
    type: CommandType
    schedule_id: str
    tenant: str
    idempotency_key: NotRequired[str | None]
    expected_version: NotRequired[int | None]
    spec: NotRequired[ScheduleSpec | None]
    occurrence_id: NotRequired[str | None]
    issued_at_ms: int
    backfill_from_ms: NotRequired[int | None]
    backfill_to_ms: NotRequired[int | None]
    overlap_override: NotRequired[OverlapPolicy | None]
    note: NotRequired[str | None]


class CommandResult(TypedDict):
    """The one outcome of a Command, on <prefix>.command-results keyed by schedule_id."""

    command_id: str
    schedule_id: str
    tenant: str
    command_type: str
    status: CommandStatus
    version: NotRequired[int | None]
    next_fires_ms: NotRequired[list[int]]
    reason: NotRequired[RejectReason | None]
    message: NotRequired[str | None]
    source: NotRequired[str | None]
    processed_at_ms: int


class CreateBatch(TypedDict):
    """Many CREATE commands in one record on <prefix>.commands: the bulk path of `scheduler schedules import` (a
    public interface: any producer may write it). Written to the partition every one of its schedule_ids hashes
    to, as each alone would be keyed (murmur2, see topologies/scheduler.toml); the record key is batch_id. Each
    CREATE is taken in order exactly as the same Command alone, with the same validation, idempotency and quota,
    and gets its own CommandResult; a command that is not a CREATE, or whose schedule_id belongs to another
    partition, is rejected as MALFORMED_RECORD and the others still go in.
    """

    batch_id: str
    commands: list[Command]


class DeadLetter(TypedDict):
    """An occurrence that failed permanently or exhausted its retries, on <prefix>.dead-letters.<tenant> keyed by
    schedule_id, with its attempt history; a RERUN command brings it back with the same occurrence_id.
    """

    occurrence: Occurrence
    history: list[AttemptEvent]
    reason: str
    dead_at_ms: int


class LostAttempt(TypedDict):
    """An attempt that no longer holds its occurrence."""

    occurrence_id: str
    attempt: int
    attempt_token: str


class Occurrence(TypedDict):
    """One fire of a schedule handed to workers, on <prefix>.occurrences.<tenant>.<priority> keyed by schedule_id."""

    occurrence_id: str
    schedule_id: str
    tenant: str
    schedule_version: int
    scheduled_for_ms: int
    available_at_ms: int
    priority: Priority
    payload: bytes
    attempt: NotRequired[int]
    dst_rule: NotRequired[str | None]
    catch_up: NotRequired[bool]
    lease_ms: NotRequired[int]


class OccurrenceEvent(TypedDict):
    """An expected occurrence the scheduler decided not to send, on <prefix>.occurrence-events keyed by schedule_id,
    so every expected fire is accounted for. A run of consecutive fires may be summarised by one event
    (range_first_ms..range_last_ms, count).
    """

    occurrence_id: NotRequired[str | None]
    schedule_id: str
    tenant: str
    schedule_version: int
    scheduled_for_ms: NotRequired[int | None]
    kind: OccurrenceEventKind
    reason: str
    range_first_ms: NotRequired[int | None]
    range_last_ms: NotRequired[int | None]
    count: NotRequired[int]
    recorded_at_ms: int


class OccurrenceStatus(TypedDict):
    """The state of one recent occurrence with its attempts, queryable by occurrence id; the value of the
    occurrence-status store, on the compacted <prefix>.occurrence-status-changelog topic keyed by occurrence_id.
    """

    occurrence_id: str
    schedule_id: str
    tenant: str
    schedule_version: int
    scheduled_for_ms: int
    state: OccurrenceState
    attempt: NotRequired[int]
    attempt_token: NotRequired[str | None]
    next_attempt_at_ms: NotRequired[int | None]
    attempts: NotRequired[list[AttemptEvent]]
    updated_at_ms: int
    lease_expires_at_ms: NotRequired[int | None]
    progress: NotRequired[str | None]


class RunningRef(TypedDict):
    """An occurrence in flight."""

    occurrence_id: str
    attempt_token: NotRequired[str | None]
    since_ms: int


class ScheduleSpec(TypedDict):
    """What a schedule fires and how: the time expression plus every policy that decides when, how late and how often
    an occurrence may be sent. Instants are epoch milliseconds (UTC) in plain longs named *_ms.
    """

    kind: SpecKind
    expression: str
    time_zone: NotRequired[str]
    anchor_at_ms: NotRequired[int | None]
    start_at_ms: NotRequired[int | None]
    end_at_ms: NotRequired[int | None]
    max_fires: NotRequired[int | None]
    dst_gap: NotRequired[DstGapPolicy]
    dst_overlap: NotRequired[DstOverlapPolicy]
    priority: NotRequired[Priority]
    flexible_window_ms: NotRequired[int]
    misfire_policy: NotRequired[MisfirePolicy]
    catch_up_limit: NotRequired[int]
    max_lateness_ms: NotRequired[int]
    overlap_policy: NotRequired[OverlapPolicy]
    payload: NotRequired[bytes]
    max_attempts: NotRequired[int]
    retry_backoff_ms: NotRequired[int]
    run_timeout_ms: NotRequired[int]
    occurrence_deadline_ms: NotRequired[int]
    month_end: NotRequired[MonthEndPolicy]
    lease_ms: NotRequired[int]


class ScheduleState(TypedDict):
    """The public view of one schedule, on the compacted <prefix>.schedules topic keyed by schedule_id (the schedules
    store's changelog).
    """

    schedule_id: str
    tenant: str
    version: int
    state: ScheduleStatus
    spec: ScheduleSpec
    idempotency_key: NotRequired[str | None]
    create_command_id: str
    created_at_ms: int
    updated_at_ms: int
    next_fire_ms: NotRequired[int | None]
    fired_count: int
    pending: NotRequired[list[TimelineRef]]
    running: NotRequired[list[RunningRef]]
    admission_waiters: NotRequired[list[str]]
    first_next_fires_ms: NotRequired[list[int]]
    lost_attempts: NotRequired[list[LostAttempt]]
    pause_note: NotRequired[str | None]


class Tenant(TypedDict):
    """A tenant's quotas and rates, on the compacted <prefix>.tenants topic keyed by tenant."""

    tenant: str
    max_active_schedules: NotRequired[int]
    trigger_rate_per_s: NotRequired[float]
    max_concurrency: NotRequired[int]
    catch_up_rate_per_s: NotRequired[float]
    retry_budget_per_min: NotRequired[int]
    created_at_ms: int


class TimelineEntry(TypedDict):
    """One materialized occurrence in the timeline store, on the compacted <prefix>.timeline-changelog topic (binary
    key: due time then schedule, defined by the engine).
    """

    schedule_id: str
    tenant: str
    schedule_version: int
    occurrence_id: str
    scheduled_for_ms: int
    available_at_ms: int
    deadline_ms: NotRequired[int | None]
    overlap_policy: NotRequired[OverlapPolicy]
    topic: str
    lane: NotRequired[Lane]
    occurrence: bytes


class TimelineRef(TypedDict):
    """Where a materialized occurrence sits in the timeline."""

    due_ms: int
    scheduled_for_ms: int
    rank: NotRequired[int]
