"""Turns the Avro ``ScheduleSpec`` record into the time module's spec, once per distinct spec."""
from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from operator import itemgetter
from typing import Any

from scheduler.timing.instants import optional_datetime
from scheduler.timing.spec import ScheduleSpec, SpecError, parse_spec

_FIELDS = ("kind", "expression", "time_zone", "start_at_ms", "end_at_ms", "max_fires",
           "dst_gap", "dst_overlap", "anchor_at_ms", "month_end")
_KEY = itemgetter(*_FIELDS)


# A lease shorter than this would have workers heartbeat more than ten times a second.
MIN_LEASE_MS = 300


def compile_spec(spec: Mapping[str, Any]) -> ScheduleSpec:
    """`spec`: a ScheduleSpec record (scheduler.wire.records), or some of its fields. Raises SpecError naming
    the bad field; results are cached since materialization repeats them."""
    lease = spec.get("lease_ms")
    if lease is not None and lease < MIN_LEASE_MS:
        raise SpecError("lease_ms", f"must be at least {MIN_LEASE_MS} ms, got {lease}")
    try:
        values = _KEY(spec)  # a decoded or make_spec record has every field
    except KeyError:
        values = tuple(spec.get(name) for name in _FIELDS)
    return _compile(values)


@lru_cache(maxsize=65536)
def _compile(values: tuple[Any, ...]) -> ScheduleSpec:
    kind, expression, time_zone, start_at, end_at, max_fires, gap, overlap, anchor, month_end = values
    if kind is None or expression is None:
        raise SpecError("spec", "kind and expression are required")
    return parse_spec(
        str(kind).lower(),
        expression,
        time_zone or "UTC",
        start_at=optional_datetime(start_at),
        end_at=optional_datetime(end_at),
        max_fires=max_fires,
        dst_gap=str(gap or "SKIP").lower(),
        dst_overlap=str(overlap or "FIRST").lower(),
        anchor_at=optional_datetime(anchor),
        month_end=str(month_end or "SKIP").lower(),
    )
