"""A schedule's next fires as the console shows them: UTC, local wall time, and what DST did to each."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from scheduler.control.client import with_anchor
from scheduler.timing import instants
from scheduler.timing.fires import next_fires
from scheduler.timing.spec_record import compile_spec

Record = dict[str, Any]


@dataclass(frozen=True)
class FireRow:
    ms: int
    local: datetime
    dst_rule: str | None      # the DST rule that moved or chose this instant (gap_shifted, overlap_*)
    offset_changed: bool      # the zone's UTC offset differs from the previous fire's: a DST change lies between

    @property
    def dst_affected(self) -> bool:
        return self.dst_rule is not None or self.offset_changed

    @property
    def offset(self) -> str:
        delta = self.local.utcoffset() or timedelta(0)
        minutes = int(delta.total_seconds() // 60)
        sign = "+" if minutes >= 0 else "-"
        return f"UTC{sign}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"


def fire_rows(spec: Mapping[str, Any], fired_count: int, now_ms: int, count: int) -> list[FireRow]:
    """The next `count` fires after now_ms, each with its local time and DST flags."""
    spec = with_anchor(spec, now_ms)
    zone = ZoneInfo(spec.get("time_zone") or "UTC")
    fires = next_fires(compile_spec(spec), instants.to_datetime(now_ms), count, fired_count)
    rows: list[FireRow] = []
    previous = instants.to_datetime(now_ms).astimezone(zone).utcoffset()
    for fire in fires:
        local = fire.scheduled_for.astimezone(zone)
        rows.append(FireRow(instants.to_ms(fire.scheduled_for), local, fire.dst_rule, local.utcoffset() != previous))
        previous = local.utcoffset()
    return rows
