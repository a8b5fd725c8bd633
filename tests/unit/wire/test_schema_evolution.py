"""The evolution rule: only defaulted fields and enum symbols may be added; every historical version stays readable."""
from __future__ import annotations

import copy
import io
import json
import random
import re
import shutil
from pathlib import Path

import pytest
from fastavro import schemaless_reader, schemaless_writer
from fastavro.utils import generate_many

from scheduler.wire.codec import MAGIC, Codec, DecodeError
from scheduler.wire.schema_evolution import (
    IncompatibleSchema,
    check_compatible,
    compatibility_problems,
    history_problems,
    snapshot,
)
from scheduler.wire.schemas import load_current, load_history, make_version, schema_dir

NS = "scheduler.v1"


def record(name: str, fields: list[dict], **extra) -> dict:
    return {"type": "record", "name": name, "namespace": NS, "fields": fields, **extra}


BASE = record(
    "Thing",
    [
        {"name": "id", "type": "string"},
        {"name": "count", "type": "long"},
        {"name": "note", "type": ["null", "string"], "default": None},
        {"name": "level", "type": {"type": "enum", "name": "Level", "symbols": ["LOW", "HIGH"], "default": "LOW"}},
        {"name": "inner", "type": record("Inner", [{"name": "x", "type": "int"}])},
        {"name": "items", "type": {"type": "array", "items": "Inner"}},
    ],
)


def changed(edit) -> dict:
    schema = copy.deepcopy(BASE)
    edit(schema)
    return schema


def field(schema: dict, name: str) -> dict:
    return next(f for f in schema["fields"] if f["name"] == name)


def test_identical_and_additive_versions_are_compatible() -> None:
    check_compatible(BASE, BASE)
    additive = changed(lambda s: (
        s["fields"].append({"name": "added", "type": "int", "default": 7}),
        field(s, "level")["type"]["symbols"].append("URGENT"),
        field(s, "inner")["type"]["fields"].append({"name": "y", "type": ["null", "bytes"], "default": None}),
    ))
    check_compatible(BASE, additive)


@pytest.mark.parametrize(
    ("edit", "problem"),
    [
        (lambda s: s["fields"].remove(field(s, "count")), "Thing.count: field removed"),
        (lambda s: s["fields"].append({"name": "added", "type": "int"}), "Thing.added: field added without a default"),
        (lambda s: field(s, "count").update(type="string"), "Thing.count: type changed from long to string"),
        (lambda s: field(s, "count").update(type="int"), "Thing.count: type changed from long to int"),
        (lambda s: field(s, "note").update(type=["null", "string", "long"]), "Thing.note: union changed"),
        (lambda s: field(s, "note").update(type=["string", "null"], default="x"), "Thing.note<0>: type changed"),
        (lambda s: field(s, "level")["type"]["symbols"].remove("HIGH"), "enum symbols removed: HIGH"),
        (
            lambda s: (field(s, "level")["type"].pop("default"), field(s, "level")["type"]["symbols"].append("MID")),
            "enum symbols added (MID) to an enum without a default",
        ),
        (lambda s: field(s, "inner")["type"]["fields"].clear(), "Thing.inner.x: field removed"),
        (lambda s: field(s, "level")["type"].update(name="Grade"), "renamed from scheduler.v1.Level to scheduler.v1.Grade"),
        (lambda s: field(s, "inner")["type"].update(name="Outer"), "Thing.items[]: reference to undefined type scheduler.v1.Inner"),
        (
            lambda s: field(s, "inner")["type"]["fields"][0].update(type={"type": "int", "logicalType": "date"}),
            "type changed from int to int(date)",
        ),
        (
            lambda s: s["fields"].append({"name": "blob", "type": "bytes", "default": ""}),
            "bytes field added with a non-null default",
        ),
    ],
)
def test_breaking_changes_are_rejected(edit, problem: str) -> None:
    with pytest.raises(IncompatibleSchema, match=re.escape(problem)):
        check_compatible(BASE, changed(edit))


def test_a_nested_breach_in_a_referenced_type_is_found() -> None:
    """Items of the array refer to Inner by name: the walk resolves the reference."""
    new = changed(lambda s: s["fields"].__setitem__(
        5, {"name": "items", "type": {"type": "array", "items": record("Other", [])}}
    ))
    assert compatibility_problems(BASE, new) == [
        "scheduler.v1.Thing.items[]: named type renamed from scheduler.v1.Inner to scheduler.v1.Other"
    ]


def test_current_schemas_follow_the_rule_against_every_version_in_history() -> None:
    assert history_problems(schema_dir()) == []


def test_every_current_schema_is_recorded_in_history() -> None:
    """Otherwise data written today becomes unreadable after the next change."""
    recorded = {version.fingerprint for version in load_history(schema_dir())}
    missing = [v.name for v in load_current(schema_dir()).values() if v.fingerprint not in recorded]
    assert missing == [], "run: python -m scheduler.wire.schema_evolution --snapshot"


def _frame(version, record: dict) -> bytes:
    body = io.BytesIO()
    schemaless_writer(body, version.parsed, record)
    return MAGIC + version.fingerprint + body.getvalue()


def test_data_written_with_any_historical_version_decodes_with_the_current_codec() -> None:
    codec = Codec.default()
    for version in load_history(schema_dir()):
        random.seed(version.name)
        current_fields = [f["name"] for f in codec.schema(version.short_name).schema["fields"]]
        for old in generate_many(version.parsed, 10):
            name, decoded = codec.decode_any(_frame(version, old))
            assert name == version.short_name
            assert list(decoded) == current_fields
            assert codec.decode(name, _frame(version, old)) == decoded


@pytest.fixture()
def evolved(tmp_path: Path) -> Path:
    """A copy of schemas/ where Occurrence gained a field and Priority a symbol, snapshotted as v2."""
    directory = tmp_path / "schemas"
    shutil.copytree(schema_dir(), directory)
    occurrence = json.loads((directory / "Occurrence.avsc").read_text())
    occurrence["fields"].append({"name": "note", "doc": "test", "type": "string", "default": "none"})
    occurrence["fields"].append({"name": "blob", "doc": "test", "type": ["null", "bytes"], "default": None})
    (directory / "Occurrence.avsc").write_text(json.dumps(occurrence))
    priority = json.loads((directory / "Priority.avsc").read_text())
    priority["symbols"].append("URGENT")
    (directory / "Priority.avsc").write_text(json.dumps(priority))
    return directory


OCCURRENCE = {
    "occurrence_id": "occ-1", "schedule_id": "s-1", "tenant": "acme", "schedule_version": 1,
    "scheduled_for_ms": 1_700_000_000_000, "available_at_ms": 1_700_000_000_000,
    "priority": "LOW", "payload": b"p",
}


def test_an_additive_change_reads_old_data_with_defaults(evolved: Path) -> None:
    assert history_problems(evolved) == []
    old_data = Codec.default().encode("Occurrence", OCCURRENCE)
    decoded = Codec.from_directory(evolved).decode("Occurrence", old_data)
    assert decoded["note"] == "none" and decoded["blob"] is None
    assert {k: decoded[k] for k in OCCURRENCE} == OCCURRENCE


def test_old_readers_map_new_symbols_to_the_enum_default(evolved: Path) -> None:
    """What the enum default is for: a reader with the old schema and the writer's new one."""
    new = load_current(evolved)["scheduler.v1.Occurrence"]
    body = io.BytesIO()
    schemaless_writer(body, new.parsed, {**OCCURRENCE, "priority": "URGENT", "note": "n"})
    body.seek(0)
    old = Codec.default().schema("Occurrence")
    decoded = schemaless_reader(body, new.parsed, old.parsed)
    assert decoded["priority"] == "NORMAL" and "note" not in decoded


def test_data_from_a_newer_schema_needs_its_writer_schema(evolved: Path) -> None:
    """Readers must be upgraded (or get the new history file) before writers: the fingerprint is unknown."""
    new_data = Codec.from_directory(evolved).encode("Occurrence", OCCURRENCE)
    with pytest.raises(DecodeError, match="unknown schema fingerprint"):
        Codec.default().decode("Occurrence", new_data)


def test_snapshot_records_changed_schemas_once(evolved: Path) -> None:
    def next_version(name: str) -> str:
        return f"{name}.v{len(list((evolved / 'history').glob(f'{name}.v*.avsc'))) + 1}.avsc"

    expected = [next_version(n) for n in ("Command", "CreateBatch", "DeadLetter", "Occurrence", "ScheduleSpec",
                                          "ScheduleState")]
    written = snapshot(evolved)
    assert sorted(p.name for p in written) == expected
    assert snapshot(evolved) == []
    v2 = make_version(json.loads((evolved / "history" / expected[3]).read_text()))
    assert v2.fingerprint == load_current(evolved)["scheduler.v1.Occurrence"].fingerprint
    codec = Codec.from_directory(evolved)
    v1 = Codec.default().schema("Occurrence")
    assert codec.decode("Occurrence", _frame(v1, OCCURRENCE))["note"] == "none"


def test_a_breaking_change_fails_the_history_check(evolved: Path) -> None:
    tenant = json.loads((evolved / "Tenant.avsc").read_text())
    tenant["fields"] = [f for f in tenant["fields"] if f["name"] != "max_concurrency"]
    (evolved / "Tenant.avsc").write_text(json.dumps(tenant))
    assert history_problems(evolved) == ["scheduler.v1.Tenant.max_concurrency: field removed"]


def _walk_named(node, found: list) -> None:
    if isinstance(node, list):
        for branch in node:
            _walk_named(branch, found)
    elif isinstance(node, dict):
        if node.get("type") in ("record", "enum", "fixed"):
            found.append(node)
        for key in ("type", "items", "values"):
            if key in node:
                _walk_named(node[key], found)
        for f in node.get("fields", []):
            _walk_named(f["type"], found)


def test_every_type_and_field_is_documented_and_every_enum_can_evolve() -> None:
    named: list = []
    for path in sorted(schema_dir().glob("*.avsc")):
        _walk_named(json.loads(path.read_text()), named)
    undocumented = [n["name"] for n in named if not n.get("doc")]
    undocumented += [
        f"{n['name']}.{f['name']}" for n in named if n["type"] == "record" for f in n["fields"] if not f.get("doc")
    ]
    assert undocumented == []
    assert [n["name"] for n in named if n["type"] == "enum" and "default" not in n] == []


def test_an_rrule_spec_reads_as_unknown_for_a_v1_reader_which_rejects_it() -> None:
    """SpecKind gained RRULE after UNKNOWN (old symbol indexes unchanged); v1 readers fall back to UNKNOWN."""
    from scheduler.control.client import make_spec
    from scheduler.timing.errors import SpecError
    from scheduler.timing.spec_record import compile_spec

    current = load_current(schema_dir())["scheduler.v1.ScheduleSpec"]
    v1 = next(v for v in load_history(schema_dir()) if v.short_name == "ScheduleSpec")
    spec = make_spec("rrule", "DTSTART:20260105T090000 RRULE:FREQ=DAILY", month_end="CLAMP")
    body = io.BytesIO()
    schemaless_writer(body, current.parsed, spec)
    body.seek(0)
    old = schemaless_reader(body, current.parsed, v1.parsed)
    assert old["kind"] == "UNKNOWN" and "month_end" not in old
    with pytest.raises(SpecError, match="kind"):
        compile_spec(old)
    symbols = current.schema["fields"][0]["type"]["symbols"]
    assert symbols[: symbols.index("UNKNOWN") + 1] == ["ONCE", "CRON", "RATE", "UNKNOWN"]
