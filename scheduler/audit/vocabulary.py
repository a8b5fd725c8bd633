"""Enum symbols of the wire schemas, read from schemas/*.avsc so the audit never retypes them."""
from __future__ import annotations

from functools import cache
from typing import Any

from scheduler.wire.schemas import NAMESPACE, load_current, schema_dir


def _find_enum(node: Any, name: str) -> tuple[str, ...] | None:
    if isinstance(node, dict):
        if node.get("type") == "enum" and node.get("name", "").rsplit(".", 1)[-1] == name:
            return tuple(node["symbols"])
        children = list(node.values())
    elif isinstance(node, list):
        children = node
    else:
        return None
    for child in children:
        found = _find_enum(child, name)
        if found is not None:
            return found
    return None


@cache
def enum_symbols(record: str, enum: str) -> tuple[str, ...]:
    """The symbols of enum `enum` as record `record` (e.g. "OccurrenceEvent") defines or inlines it."""
    schema = load_current(schema_dir())[f"{NAMESPACE}.{record}"].schema
    found = _find_enum(schema, enum)
    if found is None:
        raise LookupError(f"{record} has no enum {enum}")
    return found


def occurrence_event_kinds() -> tuple[str, ...]:
    """Kinds an event about one occurrence can have: the schema's, minus the input-level ones."""
    return tuple(k for k in enum_symbols("OccurrenceEvent", "OccurrenceEventKind")
                 if k not in ("REJECTED_INPUT", "UNKNOWN"))


def attempt_kinds() -> tuple[str, ...]:
    return enum_symbols("AttemptEvent", "AttemptKind")
