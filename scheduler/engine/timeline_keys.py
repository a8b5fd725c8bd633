"""Byte layout of the time-bucketed timeline store.

Keys sort by lane, then due time (big-endian milliseconds), then schedule, so a
RocksDB range scan from the lane prefix yields entries in the order they fall due.
Between due time and schedule sits the entry's rank among its tenant's entries due
at the same instant (given when it is materialized), so the entries due at one
instant come out tenant by tenant in turn: rank 0 of every tenant, then rank 1...
A tenant with a hundred thousand occurrences due at the top of the hour does not
hide a small tenant's few behind them, and dispatch needs no sorting for that.

- ``D`` dispatch lane: materialized occurrences, due at ``available_at``.
- ``C`` catch-up lane: late occurrences released by a misfire policy; drained
  with its own capacity after the dispatch lane.
- ``W`` wake-ups: one per active schedule, at its next fire not yet materialized
  (taken a horizon ahead);
- ``E`` end checks: an active schedule with no fire left, a grace period after
  its last pending occurrence falls due, to complete it (taken when due).

Values of the ``D`` and ``C`` lanes are kept locally in a compact framing so that
dispatch does no Avro decoding; the changelog carries the Avro ``TimelineEntry``.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

from scheduler.wire.records import ScheduleState

DISPATCH = b"D"
CATCH_UP = b"C"
WAKE = b"W"
END = b"E"
# Header of a schedules changelog record: the value's wake-up key (empty: none), so restore rebuilds the
# wake-ups without decoding every schedule.
WAKE_HEADER = "wake"
END_RECHECK_MS = 1000  # an end check finding occurrences still held back looks again this much later
END_GRACE_MS = 60_000  # end checks wait this long after the last fire, out of the way of its burst

_MS = struct.Struct(">q")
_LEN = struct.Struct(">H")
_RANK = struct.Struct(">I")
_BODY_LEN = struct.Struct(">I")
NO_DEADLINE = 2**63 - 1


def occurrence_key(lane: bytes, due_ms: int, schedule_id: str, scheduled_for_ms: int, rank: int = 0) -> bytes:
    return lane + _MS.pack(due_ms) + _RANK.pack(rank) + schedule_id.encode() + b"\x00" + _MS.pack(scheduled_for_ms)


def wake_key(state: ScheduleState) -> bytes | None:
    """Where an ACTIVE schedule next needs its task: a wake-up at its next fire, or, with no fire left,
    an end check a grace period after its last pending occurrence falls due (it then completes and frees its
    quota slot). Derived from the schedule alone, so restore rebuilds it."""
    if state["state"] != "ACTIVE":
        return None
    if state.get("next_fire_ms") is not None:
        return WAKE + _MS.pack(state["next_fire_ms"]) + state["schedule_id"].encode()
    last_due = max((ref["due_ms"] for ref in state.get("pending") or []), default=0)
    check_ms = max(last_due + END_GRACE_MS, state["updated_at_ms"] + END_RECHECK_MS)
    return END + _MS.pack(check_ms) + state["schedule_id"].encode()


def lane_bound(lane: bytes, due_ms: int) -> bytes:
    """The first key of `lane` that falls due after `due_ms`."""
    return lane + _MS.pack(due_ms + 1)


def lane_end(lane: bytes) -> bytes:
    """The first key after every key of `lane`."""
    return bytes([lane[0] + 1])


def lane_of(key: bytes) -> bytes:
    return key[:1]


def due_ms_of(key: bytes) -> int:
    due_ms: int = _MS.unpack_from(key, 1)[0]
    return due_ms


def scheduled_for_ms_of(key: bytes) -> int:
    scheduled_for_ms: int = _MS.unpack_from(key, len(key) - 8)[0]
    return scheduled_for_ms


def wake_schedule_id(key: bytes) -> str:
    return key[9:].decode()


OVERLAP_CODES = {  # the stored byte of each policy: a storage format, never renumbered
    "ALLOW": 0, "SKIP_IF_RUNNING": 1, "QUEUE_ONE": 2}
OVERLAP_NAMES = {code: name for name, code in OVERLAP_CODES.items()}
PLAIN_OVERLAP = OVERLAP_CODES["ALLOW"]  # the packed code of an entry with no overlap policy (staging reads it raw)


@dataclass(frozen=True, slots=True)
class LocalEntry:
    """What dispatch needs of a timeline entry, nothing more."""

    tenant: str
    schedule_id: str
    topic: str
    occurrence_id: str
    occurrence: bytes
    deadline_ms: int = NO_DEADLINE
    overlap: str = "ALLOW"

    def pack(self) -> bytes:
        parts = [s.encode() for s in (self.tenant, self.schedule_id, self.topic, self.occurrence_id)]
        head = _MS.pack(self.deadline_ms) + bytes([OVERLAP_CODES[self.overlap]])
        head += b"".join(_LEN.pack(len(p)) + p for p in parts)
        return head + _BODY_LEN.pack(len(self.occurrence)) + self.occurrence

    @staticmethod
    def head(data: bytes) -> tuple[int, str, str]:
        """(deadline_ms, overlap policy, tenant): all dispatch needs to choose an entry."""
        (n,) = _LEN.unpack_from(data, 9)
        return _MS.unpack_from(data, 0)[0], OVERLAP_NAMES[data[8]], data[11 : 11 + n].decode()

    @classmethod
    def unpack(cls, data: bytes) -> LocalEntry:
        (deadline_ms,) = _MS.unpack_from(data, 0)
        overlap = OVERLAP_NAMES[data[8]]
        fields: list[str] = []
        pos = 9
        for _ in range(4):
            (n,) = _LEN.unpack_from(data, pos)
            pos += 2
            fields.append(data[pos : pos + n].decode())
            pos += n
        (n,) = _BODY_LEN.unpack_from(data, pos)
        pos += 4
        return cls(fields[0], fields[1], fields[2], fields[3], data[pos : pos + n], deadline_ms, overlap)
