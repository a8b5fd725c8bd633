"""Schedule specs on the client's side: built with the schema's defaults, validated, previewed, diffed.

Pure (the clock is read only where a caller gives no instant): what can be checked before a command is sent
(a bad cron, an unknown zone, a backfill in the future) is rejected here with the reason the engine would give.
"""
from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, TypeVar

from scheduler.control.errors import ValidationError
from scheduler.timing import instants
from scheduler.timing.fires import Fire, next_fires, require_fire
from scheduler.timing.spec import ScheduleSpec, SpecError
from scheduler.timing.spec_record import compile_spec
from scheduler.wire import vocabulary
from scheduler.wire.limits import PREVIEW_COUNT

Record = dict[str, Any]
S = TypeVar("S", bound=Mapping[str, Any])  # a spec: a ScheduleSpec record, or the fields a caller gave

MAX_PREVIEW = 1000
OVERLAP_POLICIES = frozenset(vocabulary.choices("OverlapPolicy"))
# Every ScheduleSpec field with its schema default (all but kind and expression, which make_spec takes).
SPEC_DEFAULTS: Record = vocabulary.field_defaults("ScheduleSpec")
SPEC_FIELDS = frozenset(vocabulary.field_names("ScheduleSpec"))
# The spec fields that hold instants (epoch ms); the other `*_ms` fields are durations.
SPEC_INSTANT_FIELDS = frozenset({"anchor_at_ms", "start_at_ms", "end_at_ms"})


def make_spec(kind: str, expression: str, time_zone: str = "UTC", **fields: Any) -> Record:
    """A full ScheduleSpec record; unknown fields are an error, not silently ignored."""
    unknown = set(fields) - SPEC_FIELDS
    if unknown:
        raise ValueError(f"unknown spec fields: {sorted(unknown)}")
    return {**SPEC_DEFAULTS, **fields, "kind": kind.upper(), "expression": expression, "time_zone": time_zone}


def validate_spec(spec: Mapping[str, Any], now_ms: int | None = None) -> None:
    """A spec about to be sent: it compiles, and it fires within the time core's search horizon after
    `now_ms` (default: now), as the engine checks it (a spec that never fires is refused there too)."""
    compiled = _compiled(spec)
    try:
        require_fire(compiled, instants.to_datetime(int(time.time() * 1000) if now_ms is None else now_ms))
    except SpecError as exc:
        raise ValidationError("INVALID_SPEC", f"{exc.field}: {exc.message}") from exc


def _compiled(spec: Mapping[str, Any]) -> ScheduleSpec:
    """The spec compiled, or the ValidationError the engine's reason would be (a stored spec's preview
    needs only this: one that has fired its last still previews, as nothing)."""
    try:
        return compile_spec(spec)
    except SpecError as exc:
        reason = "UNKNOWN_ZONE" if exc.field == "time_zone" else "INVALID_SPEC"
        raise ValidationError(reason, f"{exc.field}: {exc.message}") from exc
    except (OverflowError, ValueError) as exc:  # an instant outside the calendar's years 1..9999
        raise ValidationError("INVALID_SPEC", str(exc)) from exc


def with_anchor(spec: S, now_ms: int) -> S | Record:
    """A RATE spec without anchor_at_ms or start_at_ms counts its periods from now (to the second)."""
    if spec.get("kind") == "RATE" and spec.get("anchor_at_ms") is None and spec.get("start_at_ms") is None:
        return {**spec, "anchor_at_ms": now_ms - now_ms % 1000}
    return spec


def preview(spec: Mapping[str, Any], count: int = PREVIEW_COUNT, after_ms: int | None = None,
            fired_before: int = 0) -> list[int]:
    """The next `count` fires (epoch ms) of `spec` strictly after `after_ms` (default: now), computed locally."""
    return [instants.to_ms(f.scheduled_for) for f in preview_fires(spec, count, after_ms, fired_before)[1]]


def preview_fires(spec: Mapping[str, Any], count: int, after_ms: int | None = None, fired_before: int = 0,
                  *, must_fire: bool = False) -> tuple[ScheduleSpec, list[Fire]]:
    """The compiled spec and its next `count` fires strictly after `after_ms` (default: now), with the DST
    rule each applied. `must_fire`: a spec about to be created, whose having no fire at all within the
    search horizon is the INVALID_SPEC the engine would answer (a stored schedule past its last fire
    previews as nothing)."""
    after = int(time.time() * 1000) if after_ms is None else after_ms
    compiled = _compiled(with_anchor(spec, after))
    if not 0 <= count <= MAX_PREVIEW:
        raise ValidationError("INVALID_SPEC", f"count: must be between 0 and {MAX_PREVIEW}")
    try:
        fires = next_fires(compiled, instants.to_datetime(after), count, fired_before)
        if must_fire and count and not fires:
            require_fire(compiled, instants.to_datetime(after))
    except SpecError as exc:
        raise ValidationError("INVALID_SPEC", f"{exc.field}: {exc.message}") from exc
    except (OverflowError, ValueError) as exc:  # instants past the calendar's range (year 1..9999)
        raise ValidationError("INVALID_SPEC", f"preview: {exc}") from exc
    return compiled, fires


def validate_backfill(from_ms: int, to_ms: int, now_ms: int, overlap_override: str | None) -> None:
    if from_ms > to_ms:
        raise ValidationError("INVALID_SPEC", "backfill: the range starts after it ends")
    if to_ms > now_ms:
        raise ValidationError("INVALID_SPEC", "backfill: the range must lie in the past")
    validate_overlap(overlap_override)


def validate_overlap(overlap_override: str | None) -> None:
    """A backfill's or a trigger's overlap policy instead of the schedule's: None, or one of the policies."""
    if overlap_override is not None and overlap_override not in OVERLAP_POLICIES:
        raise ValidationError("INVALID_SPEC", f"overlap_override: one of {sorted(OVERLAP_POLICIES)}")


def dry_run_diff(current: Mapping[str, Any], spec: Mapping[str, Any], now_ms: int,
                 count: int = PREVIEW_COUNT) -> Record:
    """What an UPDATE of `current` to `spec` would change, as the next fires before and after."""
    fired = current["fired_count"]
    return {
        "schedule_id": current["schedule_id"], "version": current["version"], "state": current["state"],
        "dry_run": True,
        "before_ms": preview(current["spec"], count, now_ms, fired),
        "after_ms": preview(spec, count, now_ms, fired),
    }
