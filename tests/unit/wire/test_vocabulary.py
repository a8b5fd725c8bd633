"""Every derived piece of the wire vocabulary equals what the schema files say, read here independently."""
from __future__ import annotations

import json
import typing
from pathlib import Path

import pytest

from scheduler.api import models
from scheduler.control import spec_flags, specs, tenants
from scheduler.timing import cron, dst, misfire, spec
from scheduler.wire import vocabulary

SCHEMAS = Path(__file__).resolve().parents[3] / "schemas"


def file_types() -> dict[str, dict]:
    """name -> definition, for every named type anywhere in the current files (a plain recursive read)."""
    found: dict[str, dict] = {}

    def visit(node: object) -> None:
        if isinstance(node, dict):
            if node.get("type") in ("record", "enum") and "name" in node:
                found[node["name"]] = node
            for value in node.values():
                visit(value)
        elif isinstance(node, list):
            for value in node:
                visit(value)

    for path in SCHEMAS.glob("*.avsc"):
        visit(json.loads(path.read_text()))
    return found


TYPES = file_types()
ENUMS = sorted(name for name, node in TYPES.items() if node["type"] == "enum")


@pytest.mark.parametrize("enum", ENUMS)
def test_every_enum_and_its_choices(enum: str) -> None:
    assert vocabulary.symbols(enum) == tuple(TYPES[enum]["symbols"])
    assert vocabulary.choices(enum) == tuple(s for s in TYPES[enum]["symbols"] if s != "UNKNOWN")


def schema_defaults(record: str) -> dict:
    fields = TYPES[record]["fields"]
    return {f["name"]: f["default"].encode("latin-1") if f["type"] == "bytes" else f["default"]
            for f in fields if "default" in f}


def test_spec_and_quota_defaults_are_the_schemas() -> None:
    assert specs.SPEC_DEFAULTS == schema_defaults("ScheduleSpec")
    assert specs.SPEC_FIELDS == {f["name"] for f in TYPES["ScheduleSpec"]["fields"]}
    assert set(specs.SPEC_DEFAULTS) == specs.SPEC_FIELDS - {"kind", "expression"}
    assert tenants.QUOTA_DEFAULTS == schema_defaults("Tenant")
    assert specs.OVERLAP_POLICIES == set(TYPES["OverlapPolicy"]["symbols"]) - {"UNKNOWN"}


def test_the_cli_offers_every_optional_spec_field_with_the_schemas_choices() -> None:
    spec_fields = {f["name"]: f for f in TYPES["ScheduleSpec"]["fields"]}
    enums = {name: field["type"] for name, field in spec_fields.items()
             if isinstance(field["type"], dict) and field["type"]["type"] == "enum"}
    enums |= {name: TYPES[field["type"]] for name, field in spec_fields.items()
              if isinstance(field["type"], str) and field["type"] in TYPES}
    assert set(spec_flags.SPEC_CHOICE_FLAGS) == set(enums) - {"kind"}
    for name, choices in spec_flags.SPEC_CHOICE_FLAGS.items():
        assert choices == tuple(s for s in enums[name]["symbols"] if s != "UNKNOWN"), name
    numbers = {name for name, field in spec_fields.items()
               if field["type"] in ("int", "long") or field["type"] in (["null", "int"], ["null", "long"])}
    assert set(spec_flags.SPEC_INT_FLAGS) | set(spec_flags.SPEC_INSTANT_FLAGS.values()) == numbers


@pytest.mark.parametrize("annotation, enum", [
    (models.SpecKind, "SpecKind"), (models.OverlapPolicy, "OverlapPolicy"), (models.ScheduleStatus, "ScheduleStatus"),
])
def test_the_http_api_takes_the_schemas_choices(annotation: object, enum: str) -> None:
    assert typing.get_args(annotation) == tuple(s for s in TYPES[enum]["symbols"] if s != "UNKNOWN")


def test_the_time_core_speaks_the_same_policies() -> None:
    """The pure time core keeps its own (lower-case) names; they must be the schema's symbols."""
    assert dst.GAP_OPTIONS == tuple(s.lower() for s in vocabulary.choices("DstGapPolicy"))
    assert dst.OVERLAP_OPTIONS == tuple(s.lower() for s in vocabulary.choices("DstOverlapPolicy"))
    assert misfire.POLICIES == vocabulary.choices("MisfirePolicy")
    assert cron.MONTH_END_OPTIONS == tuple(s.lower() for s in vocabulary.choices("MonthEndPolicy"))
    assert spec.KINDS == tuple(s.lower() for s in vocabulary.choices("SpecKind"))


def test_an_unknown_type_is_an_error_naming_it() -> None:
    with pytest.raises(KeyError, match="NoSuchEnum"):
        vocabulary.symbols("NoSuchEnum")


def test_a_symbol_the_code_branches_on_must_be_in_the_schema() -> None:
    assert vocabulary.known("OverlapPolicy", "ALLOW", "QUEUE_ONE") == ("ALLOW", "QUEUE_ONE")
    with pytest.raises(KeyError, match="no symbol ALWAYS"):
        vocabulary.known("OverlapPolicy", "ALLOW", "ALWAYS")


def test_the_timeline_encodes_every_overlap_policy() -> None:
    from scheduler.engine import timeline_keys
    assert set(timeline_keys.OVERLAP_CODES) == set(vocabulary.choices("OverlapPolicy"))
