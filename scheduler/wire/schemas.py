"""The schema repository: the `.avsc` files in `schemas/`, made self-contained and fingerprinted.

Each top-level file defines one named type and may refer to types defined in other files by
name. A reader without our code needs one self-contained schema per record, and the
single-object fingerprint is defined on such a schema, so every file is expanded here: the
first use of a foreign type inlines its definition, later uses stay references (as Avro requires).
"""
from __future__ import annotations

import copy
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastavro import parse_schema
from fastavro.schema import fingerprint, to_parsing_canonical_form

from scheduler.wire.data_files import data_dir

NAMESPACE = "scheduler.v1"
HISTORY_DIR = "history"
SCHEMA_DIR_ENV = "SCHEDULER_SCHEMA_DIR"
PRIMITIVES = frozenset(
    {"null", "boolean", "int", "long", "float", "double", "bytes", "string"}
)
NAMED_TYPES = frozenset({"record", "enum", "fixed", "error"})
KEYWORDS = PRIMITIVES | NAMED_TYPES | {"array", "map"}

Json = Any


def schema_dir() -> Path:
    """Where the `.avsc` files are.

    In order: `$SCHEDULER_SCHEMA_DIR`; the repository's `schemas/` beside the package (a source
    checkout or an editable install); `<prefix>/share/kafka-job-scheduler/schemas`, where
    pyproject's data-files puts them for a regular install.
    """
    override = os.environ.get(SCHEMA_DIR_ENV)
    if override:
        return Path(override)
    return data_dir("schemas")


@dataclass(frozen=True)
class SchemaVersion:
    """One version of one record schema, ready for the codec."""

    name: str
    schema: Json
    parsed: Json
    canonical_form: str
    fingerprint: bytes

    @property
    def short_name(self) -> str:
        return self.name.rsplit(".", 1)[-1]

    @property
    def schema_json(self) -> str:
        return json.dumps(self.schema, separators=(",", ":"))


def rabin_fingerprint(schema: Json) -> bytes:
    """CRC-64-AVRO of the Parsing Canonical Form, as the 8 little-endian bytes the framing carries.

    fastavro's hex string already lists the bytes in little-endian order (as Java does).
    """
    return bytes.fromhex(fingerprint(to_parsing_canonical_form(schema), "CRC-64-AVRO"))


def make_version(schema: Json) -> SchemaVersion:
    """Parse a self-contained schema; fails loudly on a schema fastavro would reject."""
    parsed: Json = parse_schema(copy.deepcopy(schema))
    for named in parsed["__named_schemas"].values():
        _bytes_defaults_as_bytes(named)
    return SchemaVersion(
        name=parsed["name"],
        schema=schema,
        parsed=parsed,
        canonical_form=to_parsing_canonical_form(schema),
        fingerprint=rabin_fingerprint(schema),
    )


def _bytes_defaults_as_bytes(parsed: Json) -> None:
    """Turn the JSON string default of each `bytes` field of a parsed record into bytes.

    Avro writes a bytes default as a string of code points 0-255; fastavro keeps that string,
    so a record omitting the field fails to encode and old data read with a newer schema would
    get a str. Every named type is patched once, through the parsed schema's named-type table.
    """
    if not isinstance(parsed, dict) or parsed.get("type") not in ("record", "error"):
        return
    for field in parsed["fields"]:
        kind = field["type"]
        first = kind[0] if isinstance(kind, list) else kind
        if isinstance(first, dict):
            first = first.get("type")
        if first == "bytes" and isinstance(field.get("default"), str):
            field["default"] = field["default"].encode("latin-1")


def fullname(name: str, namespace: str) -> str:
    return name if "." in name or not namespace else f"{namespace}.{name}"


def _is_keyword(kind: Json) -> bool:
    """True for a `type` value naming a primitive or a complex type, not a reference or a nested schema."""
    return isinstance(kind, str) and kind in KEYWORDS


def qualify(node: Json, namespace: str, found: dict[str, Json]) -> Json:
    """Copy of `node` with every name and reference fully qualified; named definitions go to `found`."""
    if isinstance(node, str):
        return node if node in PRIMITIVES else fullname(node, namespace)
    if isinstance(node, list):
        return [qualify(branch, namespace, found) for branch in node]
    out = dict(node)
    kind = node.get("type")
    if kind in NAMED_TYPES:
        name = fullname(node["name"], node.get("namespace", namespace))
        namespace = name.rpartition(".")[0]
        out["name"] = name
        out.pop("namespace", None)
        found[name] = out
    if kind in ("record", "error"):
        out["fields"] = [
            {**field, "type": qualify(field["type"], namespace, found)} for field in node["fields"]
        ]
    elif kind == "array":
        out["items"] = qualify(node["items"], namespace, found)
    elif kind == "map":
        out["values"] = qualify(node["values"], namespace, found)
    elif not _is_keyword(kind):
        out["type"] = qualify(kind, namespace, found)
    return out


def _inline(node: Json, definitions: dict[str, Json], defined: set[str]) -> Json:
    """Copy of a qualified node in which the first use of each named type carries its definition."""
    if isinstance(node, str):
        if node in PRIMITIVES or node in defined:
            return node
        if node not in definitions:
            raise ValueError(f"unknown Avro type {node!r}")
        return _inline(definitions[node], definitions, defined)
    if isinstance(node, list):
        return [_inline(branch, definitions, defined) for branch in node]
    out = dict(node)
    kind = node.get("type")
    if kind in NAMED_TYPES:
        defined.add(node["name"])
    if kind in ("record", "error"):
        out["fields"] = [
            {**field, "type": _inline(field["type"], definitions, defined)} for field in node["fields"]
        ]
    elif kind == "array":
        out["items"] = _inline(node["items"], definitions, defined)
    elif kind == "map":
        out["values"] = _inline(node["values"], definitions, defined)
    elif not _is_keyword(kind):
        out["type"] = _inline(kind, definitions, defined)
    return out


def load_current(directory: Path) -> dict[str, SchemaVersion]:
    """Every `*.avsc` directly in `directory`, expanded and parsed, by full name.

    Only records are returned: a file holding a shared enum (Priority) is a building block,
    never a message of its own.
    """
    definitions: dict[str, Json] = {}
    tops: list[str] = []
    for path in sorted(directory.glob("*.avsc")):
        qualified = qualify(json.loads(path.read_text()), "", definitions)
        if not isinstance(qualified, dict) or qualified.get("type") not in NAMED_TYPES:
            raise ValueError(f"{path}: a schema file must define one named type")
        if qualified["name"].rsplit(".", 1)[-1] != path.stem:
            raise ValueError(f"{path}: defines {qualified['name']}, the file name must match")
        tops.append(qualified["name"])
    return {
        name: make_version(_inline(definitions[name], definitions, set()))
        for name in tops
        if definitions[name]["type"] in ("record", "error")
    }


def load_history(directory: Path) -> list[SchemaVersion]:
    """The self-contained past versions kept in `schemas/history/` (`<Name>.v<N>.avsc`)."""
    history = directory / HISTORY_DIR
    if not history.is_dir():
        return []
    return [make_version(json.loads(p.read_text())) for p in sorted(history.glob("*.avsc"))]
