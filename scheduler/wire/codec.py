"""Avro encoding of every record on every topic, in the project's public framing (docs/schemas.md).

Default framing is the Avro specification's single-object encoding: `C3 01`, the 8-byte
little-endian CRC-64-AVRO fingerprint of the writer schema's Parsing Canonical Form, then the
Avro binary body. Any consumer decodes it with the files in `schemas/` and no registry. When a
Schema Registry URL is configured, Confluent's registry framing is used instead (RegistryCodec).

Decoding never returns garbage: bad framing, unknown schemas, truncated bodies and trailing
bytes raise DecodeError saying which, so the engine can reject the input and go on.
"""
from __future__ import annotations

import functools
import io
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from confluent_kafka.schema_registry import (
    SchemaRegistryClient,
    record_subject_name_strategy,
)
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.serde import SchemaId
from confluent_kafka.serialization import MessageField, SerializationContext
from fastavro import schemaless_reader, schemaless_writer

from scheduler.config import Settings
from scheduler.wire.schemas import (
    SchemaVersion,
    fullname,
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


class RegistryCodec:
    """Confluent Schema Registry framing (magic 0, schema id, Avro body) via confluent_kafka.

    Subjects follow the record name strategy (subject = the record's full name), because a
    record's schema does not depend on the topic it is on; the registered schema is the same
    self-contained schema the default framing fingerprints.
    """

    def __init__(self, client: Any, local: Codec) -> None:
        self.client = client
        self.local = local
        self._serializers: dict[str, Any] = {}
        self._deserializers: dict[str, Any] = {}
        self._writer_names: dict[Any, str] = {}
        conf = {"auto.register.schemas": True, "subject.name.strategy": record_subject_name_strategy}
        for version in local.schemas.values():
            serializer = AvroSerializer(client, version.schema_json, conf=conf)
            deserializer = AvroDeserializer(client, version.schema_json)
            for alias in (version.name, version.short_name):
                self._serializers[alias] = serializer
                self._deserializers[alias] = deserializer

    @classmethod
    def connect(cls, url: str, local: Codec | None = None) -> RegistryCodec:
        """A codec talking to the registry at `url` (`mock://...` gives the client's in-memory mock)."""
        return cls(SchemaRegistryClient.new_client({"url": url}), local or Codec.default())

    def encode(self, name: str, record: Mapping[str, Any]) -> bytes:
        try:
            serializer = self._serializers[name]
        except KeyError:
            raise ValueError(f"unknown record name {name!r}") from None
        # The serde parses the schema itself and cannot fill bytes defaults (see schemas.make_version):
        # the local codec completes the record with every default first.
        complete = self.local.decode(name, self.local.encode(name, record))
        data: bytes = serializer(complete, SerializationContext(self.local.schema(name).name, MessageField.VALUE))
        return data

    def decode(self, name: str, data: bytes) -> Any:
        try:
            deserializer = self._deserializers[name]
        except KeyError:
            raise ValueError(f"unknown record name {name!r}") from None
        expected = self.local.schema(name)
        writer = self._writer_name(data)
        if writer != expected.name:
            raise DecodeError(f"expected a {expected.short_name} record, the registry schema is {writer}")
        return self._deserialize(deserializer, expected, data)

    def decode_any(self, data: bytes) -> tuple[str, Any]:
        writer = self._writer_name(data)
        if writer not in self.local.schemas:
            raise DecodeError(f"registry schema {writer} is not a record of this project")
        version = self.local.schemas[writer]
        return version.short_name, self._deserialize(self._deserializers[writer], version, data)

    def _deserialize(self, deserializer: Any, version: SchemaVersion, data: bytes) -> Any:
        try:
            record = deserializer(data, SerializationContext(version.name, MessageField.VALUE))
        except Exception as error:  # the serde wraps reader failures in several error types
            raise DecodeError(f"truncated or corrupt {version.short_name} body: {error!r}") from error
        if not isinstance(record, dict):
            raise DecodeError(f"{version.short_name} body did not decode to a record")
        return record

    def _writer_name(self, data: bytes) -> str:
        """Full name of the writer schema the framing points to (registry look-ups cached)."""
        if not data:
            raise DecodeError("empty message (or a tombstone): expected a Schema Registry framed record")
        if data[0] not in (0, 1):
            raise DecodeError(f"bad magic byte {data[0]:#04x}: not Schema Registry framing")
        schema_id = SchemaId("AVRO")
        try:
            schema_id.from_bytes(io.BytesIO(data))
        except Exception as error:  # struct / uuid errors on a short header
            raise DecodeError(f"truncated Schema Registry header: {error!r}") from error
        key = schema_id.id if schema_id.id is not None else schema_id.guid
        name = self._writer_names.get(key)
        if name is None:
            try:
                if schema_id.id is not None:
                    schema = self.client.get_schema(schema_id.id)
                else:
                    schema = self.client.get_schema_by_guid(str(schema_id.guid))
            except Exception as error:  # not found, or the registry is unreachable
                raise DecodeError(f"unknown registry schema {key}: {error}") from error
            parsed = json.loads(schema.schema_str)
            name = fullname(parsed["name"], parsed.get("namespace", "")) if isinstance(parsed, dict) else str(parsed)
            self._writer_names[key] = name
        return name


def codec_from_settings(settings: Settings) -> RecordCodec:
    """Registry framing when SCHEMA_REGISTRY_URL is set, single-object encoding otherwise."""
    if settings.schema_registry_url:
        return RegistryCodec.connect(settings.schema_registry_url)
    return Codec.default()
