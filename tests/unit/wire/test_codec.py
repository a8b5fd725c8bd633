"""The public framing: single-object encoding checked byte by byte, registry framing on the mock registry,
and every kind of malformed input refused with a reason."""
from __future__ import annotations

import io
import json
import random

import pytest
from fastavro import parse_schema, schemaless_reader, schemaless_writer
from fastavro.utils import generate_many

from scheduler.config import Settings
from scheduler.wire.codec import HEADER_SIZE, MAGIC, Codec, DecodeError
from scheduler.wire.registry_codec import RegistryCodec, codec_from_settings
from scheduler.wire.schemas import schema_dir

RECORD_NAMES = [
    "ScheduleSpec", "Command", "CommandResult", "ScheduleState", "TimelineEntry",
    "Occurrence", "OccurrenceEvent", "AttemptEvent", "DeadLetter", "Tenant", "OccurrenceStatus",
]

OCCURRENCE = {
    "occurrence_id": "occ-9f2c",
    "schedule_id": "sched-42",
    "tenant": "acme",
    "schedule_version": 3,
    "scheduled_for_ms": 1_767_225_600_000,
    "available_at_ms": 1_767_225_600_123,
    "priority": "HIGH",
    "payload": b"\x00\x01payload",
    "attempt": 2,
    "dst_rule": "SHIFT",
    "catch_up": True,
    "lease_ms": 5_000,
}


def crc64_avro(data: bytes) -> int:
    """CRC-64-AVRO (Rabin) written from the Avro specification, independent of fastavro."""
    empty = 0xC15D213AA4D7A795
    table = []
    for i in range(256):
        fp = i
        for _ in range(8):
            fp = (fp >> 1) ^ (empty if fp & 1 else 0)
        table.append(fp)
    fp = empty
    for byte in data:
        fp = (fp >> 8) ^ table[(fp ^ byte) & 0xFF]
    return fp


@pytest.fixture(scope="module")
def codec() -> Codec:
    return Codec.default()


@pytest.mark.parametrize(
    ("canonical", "signed"),
    [
        ('"null"', 7195948357588979594),
        ('"boolean"', -6970731678124411036),
        ('"int"', 8247732601305521295),
        ('"long"', -3434872931120570953),
        ('{"name":"foo","type":"fixed","size":15}', 1756455273707447556),
        ('{"name":"foo","type":"record","fields":[{"name":"f1","type":"boolean"}]}', 7843277075252814651),
    ],
)
def test_reference_crc_matches_avro_published_vectors(canonical: str, signed: int) -> None:
    """The vectors of Avro's share/test/data/schema-tests.txt (Java longs), so the reference is trustworthy."""
    assert crc64_avro(canonical.encode()) == signed & 0xFFFF_FFFF_FFFF_FFFF


@pytest.mark.parametrize("name", RECORD_NAMES)
def test_header_is_magic_then_little_endian_crc64_of_canonical_form(codec: Codec, name: str) -> None:
    version = codec.schema(name)
    record = generate_many(version.parsed, 1).__next__()
    data = codec.encode(name, record)
    assert data[:2] == b"\xc3\x01"
    expected = crc64_avro(version.canonical_form.encode()).to_bytes(8, "little")
    assert data[2:10] == expected
    assert '"doc"' not in version.canonical_form and '"default"' not in version.canonical_form


@pytest.mark.parametrize("name", RECORD_NAMES)
def test_generated_records_round_trip(codec: Codec, name: str) -> None:
    random.seed(name)
    for record in generate_many(codec.schema(name).parsed, 30):
        assert codec.decode(name, codec.encode(name, record)) == record
        assert codec.decode_any(codec.encode(name, record)) == (name, record)


def test_body_is_plain_avro_readable_from_the_schema_files_alone(codec: Codec) -> None:
    """A consumer without our code: the .avsc files parsed in dependency order, fastavro, no registry."""
    named: dict = {}
    parse_schema(json.loads((schema_dir() / "Priority.avsc").read_text()), named)
    occurrence = parse_schema(json.loads((schema_dir() / "Occurrence.avsc").read_text()), named)
    data = codec.encode("Occurrence", OCCURRENCE)
    assert schemaless_reader(io.BytesIO(data[HEADER_SIZE:]), occurrence) == OCCURRENCE
    body = io.BytesIO()
    schemaless_writer(body, occurrence, OCCURRENCE)
    assert data[HEADER_SIZE:] == body.getvalue()


def test_full_and_short_names_are_the_same_record(codec: Codec) -> None:
    data = codec.encode("scheduler.v1.Occurrence", OCCURRENCE)
    assert data == codec.encode("Occurrence", OCCURRENCE)
    assert codec.decode("scheduler.v1.Occurrence", data) == OCCURRENCE


def test_missing_fields_take_their_defaults(codec: Codec) -> None:
    minimal = {k: v for k, v in OCCURRENCE.items() if k not in ("attempt", "dst_rule", "catch_up")}
    decoded = codec.decode("Occurrence", codec.encode("Occurrence", minimal))
    assert (decoded["attempt"], decoded["dst_rule"], decoded["catch_up"]) == (1, None, False)


def test_encode_refuses_incomplete_records_and_unknown_names(codec: Codec) -> None:
    with pytest.raises(ValueError, match="tenant"):
        codec.encode("Occurrence", {k: v for k, v in OCCURRENCE.items() if k != "tenant"})
    with pytest.raises(ValueError, match="unknown record name"):
        codec.encode("Ocurrence", OCCURRENCE)
    with pytest.raises(ValueError, match="unknown record name"):
        codec.encode("Priority", OCCURRENCE)


def test_default_codec_is_built_once() -> None:
    assert Codec.default() is Codec.default()


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "empty"),
        (b"\xc3", "truncated header"),
        (b"\xc3\x01\x00\x01", "truncated header"),
        (b"\x00\x00\x00\x00\x01\x02abcdefgh", "Schema Registry"),
        (b"PK\x03\x04 not avro at all", "bad magic"),
        (b"\xc3\x01" + bytes(8) + b"\x02", "unknown schema fingerprint 0000000000000000"),
    ],
)
def test_bad_framing_is_refused_with_a_reason(codec: Codec, data: bytes, reason: str) -> None:
    with pytest.raises(DecodeError, match=reason):
        codec.decode("Occurrence", data)
    with pytest.raises(DecodeError, match=reason):
        codec.decode_any(data)


@pytest.mark.parametrize("name", RECORD_NAMES)
def test_every_truncation_of_a_body_is_refused(codec: Codec, name: str) -> None:
    random.seed(name)
    for record in generate_many(codec.schema(name).parsed, 3):
        data = codec.encode(name, record)
        for end in range(HEADER_SIZE, len(data)):
            with pytest.raises(DecodeError, match="truncated or corrupt"):
                codec.decode(name, data[:end])


def test_a_tombstone_is_refused(codec: Codec, registry: RegistryCodec) -> None:
    for framing in (codec, registry):
        with pytest.raises(DecodeError, match="tombstone"):
            framing.decode_any(None)  # type: ignore[arg-type]


def test_trailing_bytes_are_refused(codec: Codec) -> None:
    data = codec.encode("Occurrence", OCCURRENCE)
    with pytest.raises(DecodeError, match="3 trailing bytes"):
        codec.decode("Occurrence", data + b"xyz")


def test_corrupt_bodies_are_refused(codec: Codec) -> None:
    spec = {"kind": "CRON", "expression": "0 9 * * *"}
    data = bytearray(codec.encode("ScheduleSpec", spec))
    data[HEADER_SIZE] = 0x7E  # enum index 63: SpecKind has 4 symbols
    with pytest.raises(DecodeError, match="corrupt ScheduleSpec"):
        codec.decode("ScheduleSpec", bytes(data))
    tenant = bytearray(codec.encode("Tenant", {"tenant": "ab", "created_at_ms": 0}))
    tenant[HEADER_SIZE + 1 : HEADER_SIZE + 3] = b"\xff\xfe"  # the tenant name is no longer UTF-8
    with pytest.raises(DecodeError, match="corrupt Tenant"):
        codec.decode("Tenant", bytes(tenant))


def test_a_record_of_another_type_is_refused(codec: Codec) -> None:
    data = codec.encode("Occurrence", OCCURRENCE)
    with pytest.raises(DecodeError, match="expected a Command record.*Occurrence"):
        codec.decode("Command", data)


def test_timeline_entry_carries_a_ready_to_send_occurrence(codec: Codec) -> None:
    occurrence = codec.encode("Occurrence", OCCURRENCE)
    entry = {
        "schedule_id": "sched-42", "tenant": "acme", "schedule_version": 3, "occurrence_id": "occ-9f2c",
        "scheduled_for_ms": OCCURRENCE["scheduled_for_ms"], "available_at_ms": OCCURRENCE["available_at_ms"],
        "topic": "sched.occurrences.acme.high", "occurrence": occurrence,
    }
    decoded = codec.decode("TimelineEntry", codec.encode("TimelineEntry", entry))
    assert decoded["lane"] == "STRICT"
    assert codec.decode_any(decoded["occurrence"]) == ("Occurrence", OCCURRENCE)


@pytest.fixture()
def registry() -> RegistryCodec:
    return RegistryCodec.connect(f"mock://{random.random()}")


def test_registry_framing_round_trips_every_record(registry: RegistryCodec, codec: Codec) -> None:
    for name in RECORD_NAMES:
        random.seed(name)
        for record in generate_many(codec.schema(name).parsed, 5):
            data = registry.encode(name, record)
            assert data[0] == 0
            assert registry.decode(name, data) == record
            assert registry.decode_any(data) == (name, record)


def test_registry_framing_is_confluent_wire_format_under_the_record_name(registry: RegistryCodec) -> None:
    data = registry.encode("Occurrence", OCCURRENCE)
    schema_id = int.from_bytes(data[1:5], "big")
    assert data[0] == 0
    registered = registry.client.get_schema(schema_id)
    assert json.loads(registered.schema_str)["name"] == "scheduler.v1.Occurrence"
    assert "scheduler.v1.Occurrence" in registry.client.get_subjects()
    body = data[5:]
    assert schemaless_reader(io.BytesIO(body), Codec.default().schema("Occurrence").parsed) == OCCURRENCE


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "empty"),
        (b"\xc3\x01" + bytes(12), "bad magic byte 0xc3"),
        (b"\x00\x00\x00", "truncated Schema Registry header"),
        (b"\x00\x00\x00\x03\xe7" + b"body", "unknown registry schema 999"),
    ],
)
def test_registry_bad_framing_is_refused_with_a_reason(registry: RegistryCodec, data: bytes, reason: str) -> None:
    with pytest.raises(DecodeError, match=reason):
        registry.decode("Occurrence", data)
    with pytest.raises(DecodeError, match=reason):
        registry.decode_any(data)


def test_registry_fills_defaults_like_the_default_framing(registry: RegistryCodec, codec: Codec) -> None:
    spec = {"kind": "CRON", "expression": "0 9 * * *"}
    decoded = registry.decode("ScheduleSpec", registry.encode("ScheduleSpec", spec))
    assert decoded == codec.decode("ScheduleSpec", codec.encode("ScheduleSpec", spec))
    assert decoded["payload"] == b"" and decoded["priority"] == "NORMAL"


def test_registry_refuses_truncated_bodies_and_other_types(registry: RegistryCodec) -> None:
    data = registry.encode("Occurrence", OCCURRENCE)
    for end in range(6, len(data)):
        with pytest.raises(DecodeError, match="truncated or corrupt"):
            registry.decode("Occurrence", data[:end])
    with pytest.raises(DecodeError, match="expected a Command record"):
        registry.decode("Command", data)


def test_settings_choose_the_framing(tmp_path) -> None:
    plain = Settings("127.0.0.1:9092", "sched", tmp_path, None)
    with_registry = Settings("127.0.0.1:9092", "sched", tmp_path, "mock://settings")
    assert codec_from_settings(plain) is Codec.default()
    chosen = codec_from_settings(with_registry)
    assert isinstance(chosen, RegistryCodec)
    assert chosen.encode("Occurrence", OCCURRENCE)[0] == 0
    assert Codec.default().encode("Occurrence", OCCURRENCE)[:2] == MAGIC


def test_a_command_with_its_spec_is_written_as_fastavro_writes_it_and_a_spec_that_does_not_fit_is_refused(
        codec: Codec) -> None:
    """The codec names the union branch of Command.spec (no whole-record validation to find it): same bytes."""
    from scheduler.control.client import make_spec

    command = {"command_id": "c1", "type": "CREATE", "schedule_id": "s1", "tenant": "acme",
               "spec": make_spec("cron", "0 9 * * MON-FRI", "Asia/Tokyo", payload=b"{}"), "issued_at_ms": 1}
    body = io.BytesIO()
    schemaless_writer(body, codec.schema("Command").parsed, command)
    assert codec.encode("Command", command)[HEADER_SIZE:] == body.getvalue()
    assert codec.decode("Command", codec.encode("Command", {**command, "spec": None}))["spec"] is None
    for bad in ({k: v for k, v in command["spec"].items() if k != "expression"}, {**command["spec"], "max_attempts": "3"}):
        with pytest.raises(ValueError):
            codec.encode("Command", {**command, "spec": bad})


def test_a_create_batch_names_the_spec_branch_of_every_command_and_writes_what_fastavro_writes(
        codec: Codec) -> None:
    from scheduler.control.client import make_spec

    commands = [{"command_id": f"c{n}", "type": "CREATE", "schedule_id": f"s{n}", "tenant": "acme",
                 "spec": make_spec("once", "2030-01-01T00:00:00Z", payload=bytes([n])) if n % 3 else None,
                 "idempotency_key": None, "expected_version": None, "occurrence_id": None, "issued_at_ms": n,
                 "backfill_from_ms": None, "backfill_to_ms": None, "overlap_override": None, "note": None} for n in range(7)]
    batch = {"batch_id": "b1", "commands": commands}
    body = io.BytesIO()
    schemaless_writer(body, codec.schema("CreateBatch").parsed, batch)
    assert codec.encode("CreateBatch", batch)[HEADER_SIZE:] == body.getvalue()
    assert codec.decode("CreateBatch", codec.encode("CreateBatch", batch)) == batch
    with pytest.raises(ValueError):
        codec.encode("CreateBatch", {"batch_id": "b1", "commands": [{**commands[1], "spec": {"kind": "ONCE"}}]})
