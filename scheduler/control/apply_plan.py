"""`scheduler schedules apply|export`: a file of desired schedules compared with the live ones, as a plan.

A schedule carries no name, so an entry is keyed by its `schedule_id` within its tenant (or, without one, by
the id `create` derives from its `idempotency_key`: stable too). An entry without either is rejected: apply
could not tell an edited entry from a new one. An entry is the line of `schedules import` (the HTTP API's
create body plus the tenant, `tenant` defaulting to the command's `--tenant`), and `export` writes exactly
that, with the spec fields that differ from the schema's defaults, so export -> apply is a no-op.

Pure: the live states and the clock's reading come in; the plan says what to CREATE, UPDATE (with the
fields that change), leave alone and, with `prune`, pause or cancel.
"""
from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml
from pydantic import ValidationError as PydanticError

from scheduler.control.client import SchedulerClient
from scheduler.control.errors import SchedulerError, ValidationError
from scheduler.control.schedule_import import DUPLICATE, ImportLine, Rejection
from scheduler.control.specs import SPEC_DEFAULTS, validate_spec, with_anchor

Record = dict[str, Any]
Key = tuple[str, str]  # (tenant, schedule_id)

FORMATS = ("jsonl", "yaml")
PRUNE_ACTIONS = ("cancel", "pause")
FINISHED = frozenset({"CANCELED", "COMPLETED"})  # no command changes these any more
EXPORTED_STATES = frozenset({"ACTIVE", "PAUSED"})
# The first fields of an exported spec, in this order; the rest follow in the schema's order.
LEADING_FIELDS = ("kind", "expression", "time_zone")


@dataclass(frozen=True)
class Entry:
    """One schedule the file wants: its full spec (the schema's defaults filled in)."""

    line: int
    tenant: str
    schedule_id: str
    spec: Record


@dataclass(frozen=True)
class Change:
    """One command apply sends: `action` is create, update, pause or cancel; `diff` is field -> (before, after)."""

    action: str
    tenant: str
    schedule_id: str
    line: int | None = None  # None for a schedule pruned because the file no longer lists it
    version: int | None = None  # the live version an update or a prune is conditional on
    spec: Record | None = None
    diff: dict[str, tuple[Any, Any]] = field(default_factory=dict)


@dataclass
class ApplyPlan:
    changes: list[Change] = field(default_factory=list)
    unchanged: int = 0
    lines: int = 0
    rejections: list[Rejection] = field(default_factory=list)
    prune_skipped: bool = False  # --prune was asked, but some entry could not be read

    def counts(self) -> dict[str, int]:
        counted = {action: 0 for action in ("create", "update", "pause", "cancel")}
        for change in self.changes:
            counted[change.action] += 1
        return counted


def file_format(path: str, given: str | None) -> str:
    """`--format` when given, else YAML for a `.yaml`/`.yml` file, JSON Lines otherwise (and for stdin)."""
    if given is not None:
        return given
    return "yaml" if path.lower().endswith((".yaml", ".yml")) else "jsonl"


def raw_entries(text: str, fmt: str) -> Iterator[tuple[int, Any]]:
    """(line number, parsed object) of a JSON Lines file (blank lines skipped), or (entry number, object) of a
    YAML file: one list of entries, or one entry per document. A line that is not JSON yields its text, for
    `read_entries` to reject; a file that is not YAML raises ValidationError (nothing of it is applied)."""
    if fmt == "jsonl":
        for number, line in enumerate(text.splitlines(), 1):
            if line.strip():
                yield number, line
        return
    try:
        documents = [doc for doc in yaml.safe_load_all(text) if doc is not None]
    except yaml.YAMLError as exc:
        raise ValidationError("USAGE", f"not YAML: {exc}") from exc
    items = documents[0] if len(documents) == 1 and isinstance(documents[0], list) else documents
    yield from enumerate(items, 1)


def read_entries(items: Iterable[tuple[int, Any]], default_tenant: str | None) -> tuple[list[Entry], list[Rejection]]:
    """The file's entries, each checked as `schedules import` checks a line, and keyed; bad ones are rejected
    with their number and reason, the same schedule listed twice is a DUPLICATE the second time."""
    entries: list[Entry] = []
    rejections: list[Rejection] = []
    seen: dict[Key, int] = {}
    for number, item in items:
        try:
            entry = _entry(number, item, default_tenant)
        except SchedulerError as exc:
            rejections.append(Rejection(number, exc.reason, exc.message))
            continue
        first = seen.setdefault((entry.tenant, entry.schedule_id), number)
        if first != number:
            rejections.append(Rejection(number, DUPLICATE, f"the same schedule as entry {first}",
                                        entry.tenant, entry.schedule_id))
            continue
        entries.append(entry)
    return entries, rejections


def _entry(number: int, item: Any, default_tenant: str | None) -> Entry:
    try:
        if isinstance(item, str):
            item = json.loads(item)
        if isinstance(item, dict) and default_tenant and "tenant" not in item:
            item = {**item, "tenant": default_tenant}
        line = ImportLine.model_validate(item)
    except json.JSONDecodeError as exc:
        raise ValidationError("MALFORMED_RECORD", f"not JSON: {exc.msg}") from exc
    except PydanticError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "entry"
        reason = "INVALID_SPEC" if first["loc"][:1] == ("spec",) else "MALFORMED_RECORD"
        raise ValidationError(reason, f"{where}: {first['msg']}") from exc
    if line.schedule_id is None and line.idempotency_key is None:
        raise ValidationError("MALFORMED_RECORD", "apply keys each entry by schedule_id (or idempotency_key): "
                                                  "give one, so that an edited entry updates its schedule")
    schedule_id = SchedulerClient.create_id(line.tenant, line.schedule_id, line.idempotency_key)
    return Entry(number, line.tenant, schedule_id, line.spec.record())


def desired_spec(wanted: Record, live: Record) -> Record:
    """A RATE entry that names neither anchor_at_ms nor start_at_ms keeps the anchor the scheduler chose."""
    if (wanted["kind"] == "RATE" and wanted.get("anchor_at_ms") is None and wanted.get("start_at_ms") is None
            and live.get("anchor_at_ms") is not None):
        return {**wanted, "anchor_at_ms": live["anchor_at_ms"]}
    return wanted


def spec_diff(before: Record, after: Record) -> dict[str, tuple[Any, Any]]:
    names = dict.fromkeys([*LEADING_FIELDS, *SPEC_DEFAULTS])  # kind and expression have no default
    return {name: (before.get(name), after.get(name)) for name in names if before.get(name) != after.get(name)}


def plan_apply(entries: list[Entry], unread: list[Rejection], live: Mapping[Key, Mapping[str, Any]], prune: str | None,
               prune_tenants: Iterable[str], now_ms: int) -> ApplyPlan:
    """What applying `entries` to the `live` schedules (every schedule of `prune_tenants` and of the entries'
    tenants) means; `unread` are the file's entries `read_entries` rejected. A changed spec is checked as the
    engine would (at `now_ms`); a finished schedule (CANCELED, COMPLETED) whose entry differs is rejected: no
    command changes it any more. With `prune`, the live schedules of `prune_tenants` no entry names are
    canceled, or paused (those ACTIVE); not when an entry could not be read, as its schedule would be pruned."""
    plan = ApplyPlan(lines=len(entries) + len(unread), rejections=list(unread))
    for entry in entries:
        state = live.get((entry.tenant, entry.schedule_id))
        wanted = entry.spec if state is None else desired_spec(entry.spec, state["spec"])
        diff = {} if state is None else spec_diff(state["spec"], wanted)
        if state is not None and not diff:
            plan.unchanged += 1
            continue
        try:
            validate_spec(with_anchor(wanted, now_ms), now_ms)
            if state is not None and state["state"] in FINISHED:
                raise ValidationError("INVALID_STATE", f"the schedule is {state['state']}: nothing changes it any "
                                                       "more; give the entry a new schedule_id")
        except SchedulerError as exc:
            plan.rejections.append(Rejection(entry.line, exc.reason, exc.message, entry.tenant, entry.schedule_id))
            continue
        if state is None:
            plan.changes.append(Change("create", entry.tenant, entry.schedule_id, entry.line, spec=wanted))
        else:
            plan.changes.append(Change("update", entry.tenant, entry.schedule_id, entry.line, state["version"],
                                       wanted, diff))
    plan.prune_skipped = prune is not None and any(r.schedule_id is None for r in unread)
    if prune is not None and not plan.prune_skipped:
        listed = {(entry.tenant, entry.schedule_id) for entry in entries}
        tenants = set(prune_tenants)
        for (tenant, schedule_id), state in sorted(live.items()):
            if tenant in tenants and (tenant, schedule_id) not in listed and _prunable(state, prune):
                plan.changes.append(Change(prune, tenant, schedule_id, version=state["version"]))
    return plan


def _prunable(state: Mapping[str, Any], action: str) -> bool:
    return state["state"] == "ACTIVE" if action == "pause" else state["state"] in EXPORTED_STATES


def export_entry(state: Mapping[str, Any]) -> Record:
    """The entry `read_entries` turns back into this schedule's spec: its fields that differ from the defaults,
    the payload as text when it is UTF-8 (else as base64)."""
    spec = state["spec"]
    out: Record = {name: spec[name] for name in LEADING_FIELDS}
    for name, default in SPEC_DEFAULTS.items():
        if name in LEADING_FIELDS or name == "payload" or spec.get(name) == default:
            continue
        out[name] = spec[name]
    payload: bytes = spec.get("payload") or b""
    if payload:
        try:
            out["payload"] = payload.decode("utf-8")
        except UnicodeDecodeError:
            out["payload_base64"] = base64.b64encode(payload).decode()
    return {"tenant": state["tenant"], "schedule_id": state["schedule_id"], "spec": out}


def export_text(states: Iterable[Mapping[str, Any]], fmt: str) -> str:
    """The live (ACTIVE, PAUSED) schedules among `states` as an apply file, ordered by tenant and id."""
    entries = [export_entry(s) for s in sorted(states, key=lambda s: (s["tenant"], s["schedule_id"]))
               if s["state"] in EXPORTED_STATES]
    if fmt == "yaml":
        return yaml.safe_dump(entries, sort_keys=False, allow_unicode=True) if entries else ""
    return "".join(json.dumps(entry) + "\n" for entry in entries)
