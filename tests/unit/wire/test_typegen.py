"""The generated record types (`scheduler/wire/records.py`) match `schemas/*.avsc`, and describe
what the decoder really returns."""
from __future__ import annotations

import typing

from scheduler.wire import records, typegen, vocabulary
from scheduler.wire.schemas import schema_dir


def test_records_module_is_up_to_date_with_the_schemas() -> None:
    expected = typegen.render(typegen.load_schemas(schema_dir()))
    assert typegen.TARGET.read_text() == expected, "run: python -m scheduler.wire.typegen"


def test_every_named_type_of_the_schemas_has_a_type() -> None:
    named = typegen.named_definitions(typegen.load_schemas(schema_dir()))
    for name, node in named.items():
        generated = getattr(records, name)
        if node["type"] == "enum":
            assert typing.get_args(generated) == tuple(node["symbols"])
            if "UNKNOWN" in node["symbols"]:
                assert typing.get_args(getattr(records, f"{name}Choice")) == vocabulary.choices(name)
        else:
            assert list(generated.__annotations__) == [field["name"] for field in node["fields"]]


def test_unions_with_null_are_optional_and_containers_are_typed() -> None:
    node = {
        "type": "record",
        "name": "scheduler.v1.Sample",
        "fields": [
            {"name": "when_ms", "type": ["null", "long"]},
            {"name": "count", "type": "int", "default": 1},
            {"name": "names", "type": {"type": "array", "items": "string"}},
            {"name": "by_name", "type": {"type": "map", "values": "double"}},
            {"name": "inner", "type": {"type": "enum", "name": "Colour", "symbols": ["RED", "BLUE"]}},
        ],
    }
    text = typegen.render([node])
    assert "    when_ms: int | None" in text
    assert "    names: list[str]" in text
    assert "    count: NotRequired[int]" in text
    assert "    by_name: dict[str, float]" in text
    assert 'Colour = Literal["RED", "BLUE"]' in text
    assert "    inner: Colour" in text
