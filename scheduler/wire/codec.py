"""Avro encoding of every record on every topic, in the project's public framing (docs/schemas.md).

Default framing is the Avro specification's single-object encoding: `C3 01`, the 8-byte
little-endian CRC-64-AVRO fingerprint of the writer schema's Parsing Canonical Form, then the
Avro binary body. Any consumer decodes it with the files in `schemas/` and no registry. When a
Schema Registry URL is configured, Confluent's registry framing is used instead (scheduler/wire/registry_codec.py).

Decoding never returns garbage: bad framing, unknown schemas, truncated bodies and trailing
bytes raise DecodeError saying which, so the engine can reject the input and go on.
"""
from __future__ import annotations

import functools
import io
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from fastavro import schemaless_reader, schemaless_writer

from scheduler.wire.schemas import (
    SchemaVersion,
    load_current,
    load_history,
    schema_dir,
)

MAGIC = b"\xc3\x01"
HEADER_SIZE = len(MAGIC) + 8


class DecodeError(ValueError):
    """Bytes that are not a record we can read; the message says why."""


class RecordCodec(Protocol):
    """What the engine, workers and tools use, whichever framing is configured.

    `decode` returns the plain dict the Avro reader makes, typed `Any`: the caller names the record, so it
    annotates the result with the record's generated type (`scheduler.wire.records`)."""

    def encode(self, name: str, record: Mapping[str, Any]) -> bytes: ...

    def decode(self, name: str, data: bytes) -> Any: ...

    def decode_any(self, data: bytes) -> tuple[str, Any]: ...


@dataclass(frozen=True)
class _Reader:
    """How to read bodies written with one known schema version."""

    name: str
    writer: Any
    reader: Any


class Codec:
    """Single-object encoding with every current schema, reading every version kept in history.

    Headers and parsed schemas are computed once, so encode and decode do only the Avro work.
    """

    def __init__(self, current: dict[str, SchemaVersion], history: list[SchemaVersion]) -> None:
        self.schemas = dict(current)
        self._versions: dict[str, SchemaVersion] = {}
        self._writers: dict[str, tuple[bytes, Any]] = {}
        self._readers: dict[bytes, _Reader] = {}
        self._branches: dict[str, dict[str, str]] = {}
        for version in current.values():
            branches = _record_branches(version.parsed)
            for alias in (version.name, version.short_name):
                self._versions[alias] = version
                self._writers[alias] = (MAGIC + version.fingerprint, version.parsed)
                if branches:
                    self._branches[alias] = branches
        for version in history:
            now = current.get(version.name)
            if now is not None and version.fingerprint != now.fingerprint:
                self._readers[version.fingerprint] = _Reader(version.short_name, version.parsed, now.parsed)
        for version in current.values():
            self._readers[version.fingerprint] = _Reader(version.short_name, version.parsed, None)

    @classmethod
    def default(cls) -> Codec:
        """The codec for the installed `schemas/` (built once per process)."""
        return _default_codec()

    @classmethod
    def from_directory(cls, directory: Path) -> Codec:
        return cls(load_current(directory), load_history(directory))

    def schema(self, name: str) -> SchemaVersion:
        """Current schema of a record, by full or short name."""
        try:
            return self._versions[name]
        except KeyError:
            raise ValueError(f"unknown record name {name!r}") from None

    def encode(self, name: str, record: Mapping[str, Any]) -> bytes:
        try:
            header, parsed = self._writers[name]
        except KeyError:
            raise ValueError(f"unknown record name {name!r}") from None
        branches = self._branches.get(name)
        if branches:  # name the union branches: fastavro would otherwise validate the whole record to find them
            try:
                return _write(header, parsed, _named(record, branches))
            except (TypeError, ValueError, KeyError, AttributeError):
                pass  # a record that does not fit: the plain path below raises what it always raised
        return _write(header, parsed, record)

    def decode(self, name: str, data: bytes) -> Any:
        expected = self.schema(name).short_name
        reader = self._reader_for(data)
        if reader.name != expected:
            raise DecodeError(f"expected a {expected} record, the fingerprint is {reader.name}'s")
        return _read_body(reader, data)

    def decode_any(self, data: bytes) -> tuple[str, Any]:
        """Decode whichever known record `data` holds; returns its short name and value."""
        reader = self._reader_for(data)
        return reader.name, _read_body(reader, data)

    def _reader_for(self, data: bytes) -> _Reader:
        if not data or len(data) < HEADER_SIZE or data[:2] != MAGIC:
            raise DecodeError(_framing_problem(data))
        reader = self._readers.get(bytes(data[2:HEADER_SIZE]))
        if reader is None:
            raise DecodeError(
                f"unknown schema fingerprint {bytes(data[2:HEADER_SIZE]).hex()}: "
                "written with a schema that is neither in schemas/ nor in schemas/history/"
            )
        return reader


def _write(header: bytes, parsed: Any, record: Mapping[str, Any]) -> bytes:
    out = io.BytesIO()
    out.write(header)
    schemaless_writer(out, parsed, record)
    return out.getvalue()


Branches = dict[str, Any]  # field -> the full name of its record branch, or the Branches of its array's items


def _record_branches(parsed: Any, named: dict[str, Any] | None = None) -> Branches:
    """Fields typed null-or-one-record (Command.spec), also inside an array of records (CreateBatch.commands)."""
    named = parsed.get("__named_schemas", {}) if named is None else named
    found: Branches = {}
    for field in parsed.get("fields", []):
        kind = field["type"]
        if isinstance(kind, list) and len(kind) == 2 and "null" in kind:
            branch = next(b for b in kind if b != "null")
            if isinstance(branch, dict) and branch.get("type") == "record":
                found[field["name"]] = branch["name"]
            elif isinstance(branch, str) and named.get(branch, {}).get("type") == "record":
                found[field["name"]] = branch
        elif isinstance(kind, dict) and kind.get("type") == "array":
            items = kind["items"]
            inner = _record_branches(named.get(items, {}) if isinstance(items, str) else items, named)
            if inner:
                found[field["name"]] = inner
    return found


def _named(record: Mapping[str, Any], branches: Branches) -> dict[str, Any]:
    """The record with each union value as (branch name, value), as fastavro takes it."""
    named = dict(record)
    for field, branch in branches.items():
        value = record.get(field)
        if isinstance(branch, str):
            if isinstance(value, dict):
                named[field] = (branch, value)
        elif isinstance(value, list):
            named[field] = [_named(item, branch) for item in value]
    return named


def _framing_problem(data: bytes) -> str:
    if not data:
        return "empty message (or a tombstone): expected an Avro single-object encoded record"
    if data[:2] != MAGIC[: len(data[:2])]:
        hint = (
            " (this looks like Confluent Schema Registry framing: is SCHEMA_REGISTRY_URL set "
            "for the producer but not here?)"
            if data[0] == 0
            else ""
        )
        return f"bad magic {bytes(data[:2]).hex(' ')}: not Avro single-object encoding (C3 01){hint}"
    return f"truncated header: {len(data)} bytes, the single-object header alone is {HEADER_SIZE}"


def _read_body(reader: _Reader, data: bytes) -> Any:
    body = io.BytesIO(data)
    body.seek(HEADER_SIZE)
    try:
        record = schemaless_reader(body, reader.writer, reader.reader)
    except Exception as error:  # any failure of the Avro reader means the body is not valid
        raise DecodeError(f"truncated or corrupt {reader.name} body: {error!r}") from error
    trailing = len(data) - body.tell()
    if trailing:
        raise DecodeError(f"{trailing} trailing bytes after the {reader.name} body")
    return record


@functools.cache
def _default_codec() -> Codec:
    return Codec.from_directory(schema_dir())
