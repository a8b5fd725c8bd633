"""Command records as the client sends them, one alone or many in a CreateBatch: a new command id, the
spec checked locally first (the engine checks it again), a RATE spec anchored at the instant it is sent."""
from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from typing import Any

from scheduler.control.errors import ValidationError
from scheduler.control.specs import validate_spec, with_anchor
from scheduler.wire.limits import MAX_NOTE_LENGTH
from scheduler.wire.topology import InvalidNameError, validate_name_part

Record = dict[str, Any]


def command_record(command_type: str, schedule_id: str, tenant: str, *, spec: Mapping[str, Any] | None = None,
                   idempotency_key: str | None = None, expected_version: int | None = None,
                   occurrence_id: str | None = None, backfill_from_ms: int | None = None,
                   backfill_to_ms: int | None = None, overlap_override: str | None = None,
                   note: str | None = None) -> Record:
    """Raises ValidationError for a spec or a note the engine would refuse."""
    if spec is not None:
        validate_spec(spec)
    if note is not None and len(note) > MAX_NOTE_LENGTH:
        raise ValidationError("INVALID_SPEC", f"note: at most {MAX_NOTE_LENGTH} characters")
    return {
        "command_id": str(uuid.uuid4()), "type": command_type, "schedule_id": schedule_id, "tenant": tenant,
        "idempotency_key": idempotency_key, "expected_version": expected_version, "spec": spec,
        "occurrence_id": occurrence_id, "issued_at_ms": int(time.time() * 1000),
        "backfill_from_ms": backfill_from_ms, "backfill_to_ms": backfill_to_ms,
        "overlap_override": overlap_override, "note": note,
    }


def create_record(tenant: str, schedule_id: str, spec: Mapping[str, Any], idempotency_key: str | None) -> Record:
    return command_record("CREATE", schedule_id, tenant, spec=with_anchor(spec, int(time.time() * 1000)),
                          idempotency_key=idempotency_key)


def create_schedule_id(tenant: str, schedule_id: str | None, idempotency_key: str | None) -> str:
    """The id a create uses: the one given, else derived from the idempotency key (so a retried create is a
    no-op), else random. Raises ValidationError for a tenant name the topics cannot carry."""
    try:
        validate_name_part("tenant", tenant)
    except InvalidNameError as exc:
        raise ValidationError("MALFORMED_RECORD", f"tenant: {exc}") from exc
    if schedule_id is not None:
        return schedule_id
    key = idempotency_key or str(uuid.uuid4())
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"{tenant}/{key}"))
