"""What the burst benches share: their constants, small helpers and the records of a run (bench/burst.py)."""
from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from scheduler.engine.config import EngineConfig
from scheduler.wire.topology import Topology

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"
TOPOLOGY = Topology.load()
PRIORITY = "HIGH"
PAYLOAD = b'{"job": "bench", "n": 0}'
LARGE = "big"
CALIBRATION_TENANT = "calib"
TXN_RECORDS = EngineConfig.dispatch_budget  # the engine's default: one transaction per loop turn at full load
PROBE_S = 0.1  # the visibility probe's interval (bench/visibility.py)


def rfc3339(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).isoformat().replace("+00:00", "Z")


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def progress(label: str, done: int, total: int, extra: str = "") -> None:
    """A plain stderr bar: no dependency, readable in a log as the last line written."""
    width = 30
    filled = int(width * done / total) if total else width
    sys.stderr.write(f"\r{label:<10} [{'#' * filled}{'.' * (width - filled)}] {done:>9,}/{total:,} {extra}\x1b[K")
    sys.stderr.flush()


def end_progress() -> None:
    sys.stderr.write("\n")


def percentile(ordered: list[int], q: float) -> int:
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0


def owners(count: int, tenants: int, large_share: float) -> list[str]:
    """Schedule n belongs to the large tenant, or round-robin to one of the small ones."""
    small = [f"s{i:03d}" for i in range(tenants)]
    large_count = int(count * large_share) if tenants else count
    result = []
    for n in range(count):
        result.append(LARGE if n < large_count else small[(n - large_count) % len(small)])
    return result


def occurrence_topics(prefix: str, tenants: list[str]) -> list[str]:
    return [TOPOLOGY.topic_name("occurrences", prefix, tenant=t, priority=p)
            for t in tenants for p in TOPOLOGY.priorities]


@dataclass
class BurstConfig:
    name: str
    count: int
    tenants: int
    large_share: float
    window_ms: int
    bootstrap: str | None
    lead_s: float | None
    margin_s: float
    profile: bool
    extra_engine_args: list[str] = field(default_factory=list)
    idle: int = 0                # schedules due beyond the horizon, loaded before the burst
    preload_idle: bool = False   # the idle set written into the changelog before the engine starts (idle_states.py)
    bystanders_per_s: int = 0    # ordinary one-shots due in each second around T (bench/bystanders.py)
    measure_state: bool = False  # state bytes per schedule and restore time from the changelog


@dataclass
class BurstResult:
    report: Path
    summary: dict[str, Any]


@dataclass
class Arrival:
    occurrence_id: str
    tenant: str
    scheduled_for_ms: int
    available_at_ms: int
    timestamp_ms: int
    seen_ms: int      # the reader received it
    visible_ms: int   # the broker showed it readable (bench/visibility.py), or seen_ms if earlier or unknown
    probed: bool = False  # the probe saw it become visible
