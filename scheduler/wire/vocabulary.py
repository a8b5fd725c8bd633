"""The wire vocabulary, read once from `schemas/*.avsc`: enum symbols, record field defaults, and the
choices the CLI and the HTTP API offer. Nothing else retypes them, so a symbol or a default added to
a schema reaches the client, the CLI, the API and the engine at once (`tests/unit/test_vocabulary.py`
checks every derived value against the files)."""
from __future__ import annotations

import json
from functools import cache
from typing import Any

from scheduler.wire.schemas import schema_dir

Json = Any

# Our enums end in this forward-compatible symbol (their Avro default): what an old reader decodes a
# newer symbol to. It is never a caller's choice.
UNKNOWN = "UNKNOWN"
LONGS = frozenset({"int", "long"})


@cache
def named_types() -> dict[str, Json]:
    """Every named type defined in the current schema files, by its short name."""
    return named_definitions([json.loads(path.read_text()) for path in sorted(schema_dir().glob("*.avsc"))])


def named_definitions(schemas: list[Json]) -> dict[str, Json]:
    """Every record, enum and fixed type defined anywhere in `schemas`, nested ones too, by short name."""
    found: dict[str, Json] = {}

    def walk(node: Json) -> None:
        if isinstance(node, list):
            for member in node:
                walk(member)
        elif isinstance(node, dict):
            if node.get("type") in ("record", "enum", "fixed") and "name" in node:
                found[node["name"].rsplit(".", 1)[-1]] = node
            for name in ("items", "values"):
                if name in node:
                    walk(node[name])
            for field in node.get("fields", ()):
                walk(field["type"])

    for schema in schemas:
        walk(schema)
    return found


def _named(name: str, kind: str) -> Json:
    node = named_types().get(name.rsplit(".", 1)[-1])
    if node is None or node["type"] != kind:
        raise KeyError(f"no {kind} named {name!r} in {schema_dir()}")
    return node


def symbols(enum: str) -> tuple[str, ...]:
    return tuple(_named(enum, "enum")["symbols"])


def known(enum: str, *names: str) -> tuple[str, ...]:
    """`names`, each checked to be a symbol of `enum`: code that branches on a symbol names it once, and
    fails at import if the schema no longer has it."""
    missing = [name for name in names if name not in symbols(enum)]
    if missing:
        raise KeyError(f"{enum} in {schema_dir()} has no symbol {', '.join(missing)}")
    return names


def choices(enum: str) -> tuple[str, ...]:
    """The symbols a caller may choose."""
    return tuple(symbol for symbol in symbols(enum) if symbol != UNKNOWN)


def field_names(record: str) -> tuple[str, ...]:
    return tuple(field["name"] for field in _named(record, "record")["fields"])


def field_defaults(record: str) -> dict[str, Any]:
    """The defaults of the fields that have one (bytes as bytes: Avro's JSON spells them as code points)."""
    defaults: dict[str, Any] = {}
    for field in _named(record, "record")["fields"]:
        if "default" in field:
            value = field["default"]
            defaults[field["name"]] = value.encode("latin-1") if _base_type(field["type"]) == "bytes" else value
    return defaults


def _base_type(kind: Json) -> Json:
    """The type of a field, with `["null", T]` read as T and a reference to a named type resolved."""
    if isinstance(kind, list):
        others = [member for member in kind if member != "null"]
        kind = others[0] if len(others) == 1 else kind
    if isinstance(kind, str) and kind.rsplit(".", 1)[-1] in named_types():
        return named_types()[kind.rsplit(".", 1)[-1]]
    return kind


def field_enum(record: str, field: str) -> str | None:
    """The enum a field takes its values from, if it does."""
    for candidate in _named(record, "record")["fields"]:
        if candidate["name"] == field:
            kind = _base_type(candidate["type"])
            return kind["name"] if isinstance(kind, dict) and kind.get("type") == "enum" else None
    raise KeyError(f"{record} has no field {field!r}")


def integer_fields(record: str) -> tuple[str, ...]:
    """The int and long fields (nullable or not) of a record, in schema order."""
    return tuple(field["name"] for field in _named(record, "record")["fields"]
                 if isinstance(_base_type(field["type"]), str) and _base_type(field["type"]) in LONGS)


def enum_fields(record: str) -> dict[str, str]:
    """field -> its enum, for the fields of a record that take an enum's symbols."""
    found = {name: field_enum(record, name) for name in field_names(record)}
    return {name: enum for name, enum in found.items() if enum is not None}
