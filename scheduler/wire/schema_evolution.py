"""The schema evolution rule, as code: a new version may only add fields with defaults and enum symbols.

A new field of type bytes must be nullable with default null: fastavro (ours, and consumers')
hands a JSON bytes default to readers of old data as a str.

Why this strict subset of Avro's resolution rules: it keeps every version readable by every
other one (old readers skip new fields and map new symbols to the enum default; new readers
fill missing fields from defaults), which is what producers and consumers deployed at different
times, in other languages, need. `schemas/history/` keeps each released version; the tests
check the current files against all of them, and the codec decodes data written with any of them.

`python -m scheduler.wire.schema_evolution` checks the current schemas against the history;
with `--snapshot` it then records every changed schema as the next history version.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from scheduler.wire.schemas import (
    HISTORY_DIR,
    PRIMITIVES,
    Json,
    load_current,
    load_history,
    qualify,
    schema_dir,
)


class IncompatibleSchema(ValueError):
    """A new schema version breaks the evolution rule; `problems` lists every breach."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


def check_compatible(old_schema: Json, new_schema: Json) -> None:
    """Raise IncompatibleSchema unless `new_schema` only adds defaulted fields and enum symbols."""
    problems = compatibility_problems(old_schema, new_schema)
    if problems:
        raise IncompatibleSchema(problems)


def compatibility_problems(old_schema: Json, new_schema: Json) -> list[str]:
    old_defs: dict[str, Json] = {}
    new_defs: dict[str, Json] = {}
    old = qualify(old_schema, "", old_defs)
    new = qualify(new_schema, "", new_defs)
    problems: list[str] = []
    _Comparison(old_defs, new_defs, problems).compare(old, new, _label(old))
    return problems


def _label(node: Json) -> str:
    return node["name"] if isinstance(node, dict) and "name" in node else "<root>"


def _kind(node: Json) -> str:
    if isinstance(node, list):
        return "union"
    if isinstance(node, str):
        return node
    kind = node["type"]
    return _kind(kind) if isinstance(kind, (dict, list)) else kind


def _logical_type(node: Json) -> str | None:
    return node.get("logicalType") if isinstance(node, dict) else None


class _Comparison:
    """One walk over an old and a new schema, collecting every breach with its path."""

    def __init__(self, old_defs: dict[str, Json], new_defs: dict[str, Json], problems: list[str]):
        self.old_defs = old_defs
        self.new_defs = new_defs
        self.problems = problems
        self.visited: set[tuple[str, str]] = set()

    def _resolve(self, node: Json, defs: dict[str, Json]) -> Json:
        if isinstance(node, str) and node not in PRIMITIVES:
            return defs[node]
        if isinstance(node, dict) and isinstance(node["type"], (dict, list)):
            return node["type"]
        if isinstance(node, dict) and node["type"] not in PRIMITIVES and node["type"] in defs:
            return defs[node["type"]]
        return node

    def compare(self, old: Json, new: Json, path: str) -> None:
        try:
            old = self._resolve(old, self.old_defs)
            new = self._resolve(new, self.new_defs)
        except KeyError as error:
            self.problems.append(f"{path}: reference to undefined type {error.args[0]}")
            return
        old_kind, new_kind = _kind(old), _kind(new)
        if old_kind != new_kind or _logical_type(old) != _logical_type(new):
            self.problems.append(f"{path}: type changed from {_describe(old)} to {_describe(new)}")
            return
        if old_kind in ("record", "error", "enum", "fixed"):
            if old["name"] != new["name"]:
                self.problems.append(f"{path}: named type renamed from {old['name']} to {new['name']}")
                return
            if (old["name"], new["name"]) in self.visited:
                return
            self.visited.add((old["name"], new["name"]))
        if old_kind in ("record", "error"):
            self._compare_records(old, new, path)
        elif old_kind == "enum":
            self._compare_enums(old, new, path)
        elif old_kind == "fixed" and old["size"] != new["size"]:
            self.problems.append(f"{path}: fixed size changed from {old['size']} to {new['size']}")
        elif old_kind == "array":
            self.compare(old["items"], new["items"], f"{path}[]")
        elif old_kind == "map":
            self.compare(old["values"], new["values"], f"{path}{{}}")
        elif old_kind == "union":
            self._compare_unions(old, new, path)

    def _compare_records(self, old: Json, new: Json, path: str) -> None:
        new_fields = {field["name"]: field for field in new["fields"]}
        old_names = {field["name"] for field in old["fields"]}
        for field in old["fields"]:
            match = new_fields.get(field["name"])
            if match is None:
                self.problems.append(f"{path}.{field['name']}: field removed")
            else:
                self.compare(field["type"], match["type"], f"{path}.{field['name']}")
        for name, field in new_fields.items():
            if name in old_names:
                continue
            if "default" not in field:
                self.problems.append(f"{path}.{name}: field added without a default")
            elif field["default"] is not None and self._default_kind(field) == "bytes":
                self.problems.append(
                    f"{path}.{name}: bytes field added with a non-null default, which fastavro readers "
                    'return as str: declare it ["null", "bytes"] with default null'
                )

    def _default_kind(self, field: Json) -> str:
        """Kind of the type a field's default belongs to (a union's first branch)."""
        kind = self._resolve(field["type"], self.new_defs)
        return _kind(self._resolve(kind[0], self.new_defs) if isinstance(kind, list) else kind)

    def _compare_enums(self, old: Json, new: Json, path: str) -> None:
        removed = [s for s in old["symbols"] if s not in new["symbols"]]
        if removed:
            self.problems.append(f"{path}: enum symbols removed: {', '.join(removed)}")
        added = [s for s in new["symbols"] if s not in old["symbols"]]
        if added and "default" not in new:
            self.problems.append(
                f"{path}: enum symbols added ({', '.join(added)}) to an enum without a default"
            )

    def _compare_unions(self, old: list[Json], new: list[Json], path: str) -> None:
        if len(old) != len(new):
            self.problems.append(f"{path}: union changed from {_describe(old)} to {_describe(new)}")
            return
        for index, (old_branch, new_branch) in enumerate(zip(old, new, strict=True)):
            self.compare(old_branch, new_branch, f"{path}<{index}>")


def _describe(node: Json) -> str:
    if isinstance(node, list):
        return "[" + ", ".join(_describe(branch) for branch in node) + "]"
    if isinstance(node, dict) and "name" in node:
        return str(node["name"])
    kind = _kind(node)
    logical = _logical_type(node)
    return f"{kind}({logical})" if logical else kind


def history_problems(directory: Path) -> list[str]:
    """Every breach of the rule between a schema in history and the current file of that name."""
    current = load_current(directory)
    problems = []
    for version in load_history(directory):
        if version.name not in current:
            problems.append(f"{version.name}: in history but no longer in {directory}")
            continue
        problems.extend(compatibility_problems(version.schema, current[version.name].schema))
    return problems


def snapshot(directory: Path) -> list[Path]:
    """Write each current schema not yet in history as `history/<Name>.v<N>.avsc`; return the new files."""
    known = {version.fingerprint for version in load_history(directory)}
    history = directory / HISTORY_DIR
    history.mkdir(exist_ok=True)
    written = []
    for version in load_current(directory).values():
        if version.fingerprint in known:
            continue
        numbers = [
            int(m.group(1))
            for p in history.glob(f"{version.short_name}.v*.avsc")
            if (m := re.fullmatch(rf"{version.short_name}\.v(\d+)\.avsc", p.name))
        ]
        path = history / f"{version.short_name}.v{max(numbers, default=0) + 1}.avsc"
        path.write_text(json.dumps(version.schema, indent=2) + "\n")
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scheduler.wire.schema_evolution", description=__doc__)
    parser.add_argument("--snapshot", action="store_true", help="record changed schemas in history")
    parser.add_argument("--dir", type=Path, default=None, help="schema directory (default: schemas/)")
    args = parser.parse_args(argv)
    directory = args.dir or schema_dir()
    problems = history_problems(directory)
    for problem in problems:
        print(problem, file=sys.stderr)
    if problems:
        return 1
    if args.snapshot:
        for path in snapshot(directory):
            print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
