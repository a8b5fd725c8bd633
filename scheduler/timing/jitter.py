"""Deterministic jitter for flexible jobs: available_at = scheduled_for + stable_hash(occurrence_id) mod window.

stable_hash(id) = first 8 bytes, big-endian, of sha256(b"jitter/v1" + id_utf8),
taken modulo the window in whole milliseconds. The same occurrence gets the same
slot after retries and failover, while the on-the-hour burst spreads evenly.
"""
from __future__ import annotations

import hashlib
from datetime import datetime, timedelta

from scheduler.timing.instants import US_PER_MS, require_aware

_TAG = b"jitter/v1"


def stable_hash(occurrence_id: str) -> int:
    return int.from_bytes(hashlib.sha256(_TAG + occurrence_id.encode("utf-8")).digest()[:8], "big")


def available_at(occurrence_id: str, scheduled_for: datetime, window: timedelta) -> datetime:
    """Strict jobs (window 0) become available exactly at scheduled_for."""
    require_aware(scheduled_for, "scheduled_for")
    window_ms = window // timedelta(milliseconds=1)
    if window_ms < 0:
        raise ValueError("window must not be negative")
    if window_ms == 0:
        return scheduled_for
    return scheduled_for + timedelta(microseconds=(stable_hash(occurrence_id) % window_ms) * US_PER_MS)


def available_at_ms(occurrence_id: str, scheduled_for_ms: int, window_ms: int) -> int:
    """available_at in epoch milliseconds, for a scheduled_for in whole milliseconds (the reconciler's unit)."""
    if window_ms < 0:
        raise ValueError("window must not be negative")
    return scheduled_for_ms + stable_hash(occurrence_id) % window_ms if window_ms else scheduled_for_ms
