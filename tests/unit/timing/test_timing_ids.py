"""occurrence_id and jitter: golden values from an independent implementation of the documented recipes."""
from __future__ import annotations

import hashlib
import struct
import subprocess
import sys
from datetime import datetime, timedelta, timezone

import pytest

from scheduler.timing.jitter import available_at
from scheduler.timing.occurrence_id import occurrence_id

UTC = timezone.utc


def _recipe(schedule_id: str, version: int, scheduled_for: datetime) -> str:
    """docs/time-semantics.md, re-implemented with struct instead of int.to_bytes."""
    sid = schedule_id.encode("utf-8")
    ms = int((scheduled_for - datetime(1970, 1, 1, tzinfo=UTC)) / timedelta(milliseconds=1))
    payload = b"occurrence-id/v1" + struct.pack(">I", len(sid)) + sid + struct.pack(">Qq", version, ms)
    return hashlib.sha256(payload).hexdigest()[:32]


CASES = [
    ("sch_01", 1, datetime(2026, 3, 8, 7, 30, tzinfo=UTC)),
    ("tenant-a/nightly", 7, datetime(2026, 11, 1, 5, 30, tzinfo=timezone(timedelta(hours=-4)))),
    ("東京-job", 0, datetime(1969, 12, 31, 23, 59, 59, 999000, tzinfo=UTC)),
    ("x" * 300, 2**63 + 5, datetime(2037, 12, 31, 23, 59, tzinfo=UTC)),
]


@pytest.mark.parametrize(("schedule_id", "version", "scheduled_for"), CASES)
def test_occurrence_id_matches_the_documented_recipe(schedule_id, version, scheduled_for):
    assert occurrence_id(schedule_id, version, scheduled_for) == _recipe(schedule_id, version, scheduled_for)


def test_occurrence_id_is_stable_across_processes():
    code = (
        "from datetime import datetime, timezone; from scheduler.timing.occurrence_id import occurrence_id;"
        "print(occurrence_id('sch_01', 1, datetime(2026, 3, 8, 7, 30, tzinfo=timezone.utc)))"
    )
    outputs = {
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                       env={"PYTHONHASHSEED": seed}).stdout.strip()
        for seed in ("1", "2")
    }
    assert outputs == {_recipe("sch_01", 1, datetime(2026, 3, 8, 7, 30, tzinfo=UTC))}


def test_occurrence_id_separates_its_inputs():
    t = datetime(2026, 1, 1, tzinfo=UTC)
    ids = {occurrence_id("ab", 1, t), occurrence_id("a", 1, t), occurrence_id("ab", 2, t),
           occurrence_id("ab", 1, t + timedelta(milliseconds=1))}
    assert len(ids) == 4
    assert occurrence_id("ab", 1, t) == occurrence_id("ab", 1, t.astimezone(timezone(timedelta(hours=9))))


def _jitter_recipe(occurrence: str, window_ms: int) -> int:
    digest = hashlib.sha256(b"jitter/v1" + occurrence.encode("utf-8")).digest()
    return struct.unpack(">Q", digest[:8])[0] % window_ms


def test_available_at_matches_recipe_and_is_deterministic():
    t = datetime(2026, 6, 15, tzinfo=UTC)
    window = timedelta(minutes=5)
    for i in range(50):
        occ = occurrence_id("sch", 1, t + timedelta(hours=i))
        first = available_at(occ, t, window)
        assert first == available_at(occ, t, window)
        assert first - t == timedelta(milliseconds=_jitter_recipe(occ, 300_000))


def test_strict_jobs_are_not_jittered():
    t = datetime(2026, 6, 15, tzinfo=UTC)
    assert available_at("anything", t, timedelta(0)) == t


def test_jitter_spreads_a_burst_over_the_window():
    t = datetime(2026, 6, 15, tzinfo=UTC)
    window = timedelta(minutes=5)
    offsets = [(available_at(occurrence_id(f"s{i}", 1, t), t, window) - t) / window for i in range(20_000)]
    assert all(0 <= o < 1 for o in offsets)
    buckets = [0] * 10
    for o in offsets:
        buckets[int(o * 10)] += 1
    assert min(buckets) > 1800 and max(buckets) < 2200  # ~2000 each; far outside 4 sigma otherwise
