"""The expiry index of attempt leases: which RUNNING occurrences fall silent when.

The lease itself (its expiry instant) is the occurrence status' `lease_expires_at_ms`; this
index only finds the expired ones without scanning every status. It lives in the admissions
store (restored as is from its changelog, which no one else reads), under a prefix that no
tenant name and none of running_slots' keys start with, so a task that takes a partition over
knows every lease the previous owner held.

Silence is measured on the scheduler's clock, from when the task processed the STARTED or
HEARTBEAT, so worker clock skew does not matter. Two guards keep a scheduler that is behind
from declaring live attempts lost: leases expire only in a turn that drained its inputs (a
backlog of heartbeats is not silence), and a task gives every lease it inherits one full
lease from the moment it starts.
"""
from __future__ import annotations

import struct

from scheduler.engine.partition_store import StoreTransaction
from scheduler.wire.records import AttemptEvent, OccurrenceStatus

STORE = "admissions"
_INDEX = b"\x08"  # expiry (ms) occurrence_id -> b""
_MS = struct.Struct(">q")
LOST_CLASS = "LeaseExpired"
TAKEN_OVER_CLASS = "LeaseTakenOver"


def _key(expires_ms: int, occurrence_id: str) -> bytes:
    return _INDEX + _MS.pack(expires_ms) + occurrence_id.encode()


def move(txn: StoreTransaction, occurrence_id: str, old_ms: int | None, new_ms: int | None) -> None:
    """The occurrence's lease went from `old_ms` to `new_ms` (None: none held)."""
    if old_ms == new_ms:
        return
    if old_ms is not None:
        txn.delete(STORE, _key(old_ms, occurrence_id))
    if new_ms is not None:
        txn.put(STORE, _key(new_ms, occurrence_id), b"")


def expired(txn: StoreTransaction, now_ms: int, limit: int) -> list[tuple[int, str]]:
    """(expiry, occurrence_id) of up to `limit` leases expired by `now_ms`, earliest first."""
    found: list[tuple[int, str]] = []
    for key in txn.store.keys_from(STORE, _INDEX, _INDEX + _MS.pack(now_ms + 1)):
        if len(found) >= limit:
            break
        if not txn.is_deleted(STORE, key):
            found.append((_MS.unpack(key[1:1 + _MS.size])[0], key[1 + _MS.size:].decode()))
    return found


def has_expired(txn: StoreTransaction, now_ms: int) -> bool:
    return bool(expired(txn, now_ms, 1))


def lost_event(status: OccurrenceStatus, now_ms: int, lease_ms: int) -> AttemptEvent:
    """The LOST attempt event the scheduler records for a silent attempt (it goes through apply_attempt)."""
    last_worker = next((e["worker_id"] for e in reversed(status["attempts"])
                        if e["attempt_token"] == status["attempt_token"]), None)
    return {
        "occurrence_id": status["occurrence_id"], "schedule_id": status["schedule_id"], "tenant": status["tenant"],
        "schedule_version": status["schedule_version"], "scheduled_for_ms": status["scheduled_for_ms"],
        "attempt": status["attempt"], "attempt_token": status["attempt_token"] or "", "kind": "LOST", "retryable": True,
        "error_class": LOST_CLASS, "error_message": f"no heartbeat for {lease_ms} ms (the lease)",
        "worker_id": last_worker, "at_ms": now_ms, "progress": status.get("progress"),
    }
