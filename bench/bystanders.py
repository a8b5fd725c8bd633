"""Bystanders of a burst (issue 16): ordinary strict one-shots due in each second of the 30 s before and the
30 s after the instant T, in the burst's own tenants' topics, measured beside the burst in the same run.

A staged burst's open transaction holds back every `read_committed` reader of the partitions it wrote
(docs/decisions/0002-staged-bursts.md); these are the occurrences that price falls on.
"""
from __future__ import annotations

import math
import time
from datetime import datetime, timezone

from scheduler.control.client import SchedulerClient, make_spec
from scheduler.timing.occurrence_id import occurrence_id

BEFORE_S = 30  # seconds before T with bystanders due in each
AFTER_S = 30   # seconds after T (T included)
# Bands of the report, in seconds relative to T: [start, end).
BANDS = ((-30, -10), (-10, -3), (-3, 0), (0, 3), (3, 10), (10, 30))


def plan(tenants: list[str], due_ms: int, per_s: int, now_s: float) -> list[tuple[str, str, int]]:
    """(schedule_id, tenant, due ms): `per_s` a second, spread over the second and round-robin over the
    tenants, from BEFORE_S before T (or from 3 s from now, if loading ended later) to AFTER_S after it."""
    first_s = max(due_ms // 1000 - BEFORE_S, math.ceil(now_s) + 3)
    return [(f"bystander-{second}-{n}", tenants[(second * per_s + n) % len(tenants)],
             second * 1000 + n * 1000 // per_s)
            for second in range(first_s, due_ms // 1000 + AFTER_S) for n in range(per_s)]


def create(client: SchedulerClient, tenants: list[str], due_ms: int, per_s: int,
           priority: str, payload: bytes) -> dict[str, tuple[str, int]]:
    """Create the bystanders; returns occurrence_id -> (tenant, due ms)."""
    if not per_s or not tenants:
        return {}
    planned = plan(tenants, due_ms, per_s, time.time())
    ids = [client.send("CREATE", sid, tenant, spec=make_spec("once", _rfc3339(at_ms), priority=priority,
                                                              payload=payload))
           for sid, tenant, at_ms in planned]
    rejected = [r for r in client.wait(ids, timeout_s=300).values() if r["status"] != "ACCEPTED"]
    if rejected:
        raise RuntimeError(f"{len(rejected)} bystander creates rejected, e.g. {rejected[0]}")
    return {occurrence_id(sid, 1, datetime.fromtimestamp(at_ms / 1000, tz=timezone.utc)): (tenant, at_ms)
            for sid, tenant, at_ms in planned}


def _rfc3339(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).isoformat().replace("+00:00", "Z")


def _pct(ordered: list[int], q: float) -> int:
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0


def lags(bystanders: dict[str, tuple[str, int]], seen: dict[str, int]) -> list[tuple[int, int]]:
    """(due ms, lag ms) of every bystander that arrived, by its first arrival."""
    return [(bystanders[oid][1], seen[oid] - bystanders[oid][1]) for oid in bystanders.keys() & seen.keys()]


def summary(due_ms: int, arrived: list[tuple[int, int]]) -> dict[str, int]:
    ordered = sorted(lag for _, lag in arrived)
    return {"count": len(ordered), "p50": _pct(ordered, 0.5), "p99": _pct(ordered, 0.99),
            "max": ordered[-1] if ordered else 0,
            "held": sum(1 for at, lag in arrived if at < due_ms <= at + lag)}


def section(due_ms: int, bystanders: dict[str, tuple[str, int]], seen: dict[str, int], burst: list[int],
            window_ms: int | None, read: dict[str, int], burst_read: list[int]) -> list[str]:
    """Burst and bystanders side by side, the bystanders by when they were due relative to T: lag to
    visibility (`seen`, `burst`) and, in the last column, p99 to the one reader's receipt (`read`,
    `burst_read`)."""
    if not bystanders:
        return []
    arrived = lags(bystanders, seen)
    arrived_read = lags(bystanders, read)
    total = summary(due_ms, arrived)
    ordered_burst = sorted(burst)

    def in_band(pairs: list[tuple[int, int]], start: int, end: int) -> list[tuple[int, int]]:
        return [(at, lag) for at, lag in pairs if start * 1000 <= at - due_ms < end * 1000]
    seconds = sorted({at // 1000 - due_ms // 1000 for _, at in bystanders.values()})
    lines = [
        "",
        "## Burst and bystanders side by side",
        "",
        f"Bystanders: {len(bystanders):,} ordinary strict one-shots, {len(bystanders) // max(1, len(seconds))} due in "
        f"each second from T{seconds[0]:+d} s to T{seconds[-1]:+d} s, round-robin over the burst's tenants' topics "
        "(the large tenant's and the small ones'). "
        + (f"The stage's produce window (its transaction open) began {window_ms:,} ms before T; " if window_ms
           else "No stage: ")
        + "only bystanders dispatched into its partitions after that can wait for its commit.",
        "",
        f"- arrived: {total['count']:,}; missing: {len(bystanders) - total['count']:,}; "
        f"due before T and visible only at or after it: {total['held']:,}",
        "",
        "| occurrences | due (relative to T) | count | p50 ms | p99 ms | max ms | p99 ms read by the reader |",
        "|---|---|---:|---:|---:|---:|---:|",
        f"| burst | T | {len(ordered_burst):,} | {_pct(ordered_burst, 0.5):,} | {_pct(ordered_burst, 0.99):,} | "
        f"{ordered_burst[-1] if ordered_burst else 0:,} | {_pct(sorted(burst_read), 0.99):,} |",
        f"| bystanders, all | T{seconds[0]:+d} s .. T{seconds[-1]:+d} s | {total['count']:,} | {total['p50']:,} | "
        f"{total['p99']:,} | {total['max']:,} | {summary(due_ms, arrived_read)['p99']:,} |",
    ]
    for start, end in BANDS:
        band = summary(due_ms, in_band(arrived, start, end))
        if band["count"]:
            lines.append(f"| bystanders | [{start:+d} s, {end:+d} s) | {band['count']:,} | {band['p50']:,} | "
                         f"{band['p99']:,} | {band['max']:,} | "
                         f"{summary(due_ms, in_band(arrived_read, start, end))['p99']:,} |")
    return lines + [""]
