"""Stable occurrence ids: the same (schedule_id, schedule_version, scheduled_for) gives the
same id in every process, machine and release, so duplicates can be de-duplicated.

Recipe (version 1), byte-exact:
    payload = b"occurrence-id/v1"
            + len(schedule_id_utf8).to_bytes(4, "big") + schedule_id_utf8
            + schedule_version.to_bytes(8, "big")            # unsigned, 0 <= v < 2**64
            + epoch_milliseconds.to_bytes(8, "big", signed=True)   # floor of scheduled_for in UTC ms
    occurrence_id = sha256(payload).hexdigest()[:32]        # 128 bits, lowercase hex
The length prefix makes the encoding injective; the version tag lets a future
recipe coexist. Never Python's hash(): it is salted per process.
"""
from __future__ import annotations

import hashlib
from collections.abc import Callable
from datetime import datetime

from scheduler.timing.instants import US_PER_MS, require_aware, to_us

_TAG = b"occurrence-id/v1"


def epoch_ms(instant: datetime) -> int:
    return to_us(require_aware(instant, "scheduled_for")) // US_PER_MS


def _prefix(schedule_id: str, schedule_version: int) -> bytes:
    """The recipe's payload up to the instant: the same for every fire of one version."""
    if not isinstance(schedule_id, str) or not schedule_id:
        raise ValueError("schedule_id must be a non-empty string")
    if isinstance(schedule_version, bool) or not isinstance(schedule_version, int) or not 0 <= schedule_version < 2**64:
        raise ValueError("schedule_version must be an integer in [0, 2**64)")
    sid = schedule_id.encode("utf-8")
    return _TAG + len(sid).to_bytes(4, "big") + sid + schedule_version.to_bytes(8, "big")


def occurrence_id(schedule_id: str, schedule_version: int, scheduled_for: datetime) -> str:
    payload = _prefix(schedule_id, schedule_version) + epoch_ms(scheduled_for).to_bytes(8, "big", signed=True)
    return hashlib.sha256(payload).hexdigest()[:32]


def occurrence_ids(schedule_id: str, schedule_version: int) -> Callable[[int], str]:
    """The same recipe as a function of epoch milliseconds, for one version's many fires: the
    reconciler computes an id for every occurrence of a range, and this skips the datetime and
    the prefix per id."""
    prefix, sha256 = _prefix(schedule_id, schedule_version), hashlib.sha256

    def of(epoch_milliseconds: int) -> str:
        return sha256(prefix + epoch_milliseconds.to_bytes(8, "big", signed=True)).hexdigest()[:32]

    return of
