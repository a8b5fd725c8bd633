"""Writes `scheduler/wire/records.py`: the static types of the records in `schemas/*.avsc`.

The Avro decoder returns plain dicts (a speed choice: no object is built per record), so the types
are `TypedDict`s that describe those dicts, and each Avro enum is a `Literal` of its symbols (what
the decoder returns for it is the symbol's `str`). They cost nothing at run time and let mypy check
every `record["field"]` and every symbol compared against a field.

Mapping: one `TypedDict` per named record, nested ones too; `["null", T]` is `T | None`; `long` and
`int` are `int`, `float` and `double` are `float`, `bytes` is `bytes`, an array is `list[T]`, a map
is `dict[str, T]`. A field with a default is `NotRequired`: the encoder fills it in when a record
built by our code leaves it out (a decoded record has every field, and mypy lets code read it).
Regenerate after changing a schema with `python -m scheduler.wire.typegen`;
`tests/unit/wire/test_typegen.py` fails while the file is out of date.
"""
from __future__ import annotations

import argparse
import json
import sys
import textwrap
from pathlib import Path
from typing import Any

from scheduler.wire import vocabulary
from scheduler.wire.schemas import schema_dir
from scheduler.wire.vocabulary import UNKNOWN

Json = Any
TARGET = Path(__file__).with_name("records.py")
LINE_LENGTH = 120
PRIMITIVE_TYPES = {
    "null": "None",
    "boolean": "bool",
    "int": "int",
    "long": "int",
    "float": "float",
    "double": "float",
    "bytes": "bytes",
    "string": "str",
}
HEADER = '''"""Static types of the records in `schemas/*.avsc` (GENERATED: do not edit by hand).

Regenerate with `python -m scheduler.wire.typegen` after changing a schema; the unit test
`tests/unit/wire/test_typegen.py` fails while this file is out of date. The records stay the plain
dicts the Avro decoder returns: these types cost nothing at run time.
"""
from __future__ import annotations

from typing import Literal, NotRequired, TypedDict
'''


def short(name: str) -> str:
    return name.rsplit(".", 1)[-1]


def named_definitions(schemas: list[Json]) -> dict[str, Json]:
    """Every record and enum defined anywhere in `schemas`, nested ones too, by short name; a fixed type has no
    TypedDict mapping and is refused."""
    found = vocabulary.named_definitions(schemas)
    for node in found.values():
        if node.get("type") == "fixed":
            raise ValueError(f"fixed type {node['name']!r} has no mapping in the type generator")
    return found


def python_type(node: Json) -> str:
    """The annotation of one Avro type, as text."""
    if isinstance(node, str):
        return PRIMITIVE_TYPES.get(node, short(node))
    if isinstance(node, list):
        members = [python_type(member) for member in node if member != "null"]
        text = " | ".join(members)
        return f"{text} | None" if "null" in node else text
    kind = node["type"]
    if kind in ("record", "enum"):
        return short(node["name"])
    if kind == "array":
        return f"list[{python_type(node['items'])}]"
    if kind == "map":
        return f"dict[str, {python_type(node['values'])}]"
    return python_type(kind)


def field_type(field: Json) -> str:
    """A field with a default may be left out of a record the code builds: the encoder fills it in."""
    text = python_type(field["type"])
    return f"NotRequired[{text}]" if "default" in field else text


def docstring(text: str, indent: str) -> list[str]:
    wrapped = textwrap.wrap(text.replace('"""', "'''"), LINE_LENGTH - len(indent) - 6, break_on_hyphens=False) or [""]
    if len(wrapped) == 1:
        return [f'{indent}"""{wrapped[0]}"""']
    return [f'{indent}"""{wrapped[0]}'] + [f"{indent}{line}" for line in wrapped[1:]] + [f'{indent}"""']


def literal_lines(name: str, symbols: list[str]) -> list[str]:
    one_line = f"{name} = Literal[{', '.join(f'{chr(34)}{symbol}{chr(34)}' for symbol in symbols)}]"
    if len(one_line) <= LINE_LENGTH:
        return [one_line]
    return [f"{name} = Literal["] + [f'    "{symbol}",' for symbol in symbols] + ["]"]


def enum_lines(node: Json) -> list[str]:
    """The enum's Literal; for an enum with the forward-compatible UNKNOWN symbol, also `<Name>Choice`, the
    symbols a caller may choose (as `vocabulary.choices`)."""
    name = short(node["name"])
    lines = literal_lines(name, node["symbols"])
    if node.get("doc"):
        lines = [f"# {line}" for line in textwrap.wrap(node["doc"], LINE_LENGTH - 2, break_on_hyphens=False)] + lines
    if UNKNOWN in node["symbols"]:
        lines += literal_lines(f"{name}Choice", [symbol for symbol in node["symbols"] if symbol != UNKNOWN])
    return lines


def record_lines(node: Json) -> list[str]:
    lines = [f"class {short(node['name'])}(TypedDict):"]
    if node.get("doc"):
        lines += docstring(node["doc"], "    ") + [""]
    lines += [f"    {field['name']}: {field_type(field)}" for field in node["fields"]]
    return lines


def render(schemas: list[Json]) -> str:
    """The module's text: enums first (their aliases are evaluated at import), then records, each
    group sorted by name so the output does not depend on file order."""
    named = named_definitions(schemas)
    blocks = [enum_lines(node) for _, node in sorted(named.items()) if node["type"] == "enum"]
    blocks += [record_lines(node) for _, node in sorted(named.items()) if node["type"] == "record"]
    body = "\n\n\n".join("\n".join(block) for block in blocks)
    return f"{HEADER}\n{body}\n"


def load_schemas(directory: Path) -> list[Json]:
    return [json.loads(path.read_text()) for path in sorted(directory.glob("*.avsc"))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m scheduler.wire.typegen",
        description="Write scheduler/wire/records.py (TypedDicts and enum Literals) from schemas/*.avsc.",
    )
    parser.add_argument("--check", action="store_true", help="exit 1 if the file is out of date, write nothing")
    args = parser.parse_args(argv)
    text = render(load_schemas(schema_dir()))
    current = TARGET.read_text() if TARGET.exists() else ""
    if args.check:
        if current != text:
            print(f"{TARGET} is out of date: run python -m scheduler.wire.typegen", file=sys.stderr)
            return 1
        return 0
    if current != text:
        TARGET.write_text(text)
        print(f"wrote {TARGET}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
