"""Confluent Schema Registry framing for every record, the alternative to the default single-object
encoding (scheduler/wire/codec.py), and the choice between them from the settings (docs/schemas.md).

Kept apart from the default codec because only deployments with a registry need it: the engine's hot
path never imports the registry client's serde."""
from __future__ import annotations

import io
import json
from collections.abc import Mapping
from typing import Any

from confluent_kafka.schema_registry import (
    SchemaRegistryClient,
    record_subject_name_strategy,
)
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.serde import SchemaId
from confluent_kafka.serialization import MessageField, SerializationContext

from scheduler.config import Settings
from scheduler.wire.codec import Codec, DecodeError, RecordCodec
from scheduler.wire.schemas import SchemaVersion, fullname


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
