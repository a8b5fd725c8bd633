"""`scheduler schedules apply -f FILE` and `scheduler schedules export`: schedules declared in a file, as
GitOps wants them. Export writes what apply reads (scheduler/control/apply_plan.py), so export -> apply
reports nothing to do; apply creates what is new, updates what changed (conditional on the version it
read), leaves the rest and, with `--prune`, cancels or pauses what the file no longer lists."""
from __future__ import annotations

import argparse
import base64
import sys
import time
from typing import Any

from scheduler.control.apply_plan import (
    FORMATS,
    PRUNE_ACTIONS,
    ApplyPlan,
    Change,
    export_text,
    file_format,
    plan_apply,
    raw_entries,
    read_entries,
)
from scheduler.control.bulk import BULK_LINGER_MS, CreateRequest
from scheduler.control.cli_common import (
    EXIT_OK,
    EXIT_REJECTED,
    EXIT_UNAVAILABLE,
    Record,
    add,
    client_for,
    client_log,
    emit,
    output_arg,
    spec_value_text,
)
from scheduler.control.client import SchedulerClient, SchedulerError, ValidationError
from scheduler.control.schedule_import import Rejection

VERBS_DONE = {"create": "created", "update": "updated", "pause": "paused", "cancel": "canceled"}
COMMAND_TYPES = {"update": "UPDATE", "pause": "PAUSE", "cancel": "CANCEL"}


def schedules_apply(args: argparse.Namespace) -> int:
    """Exit 0 when every entry was applied (or nothing was to do), 1 when some were rejected, 6 when some
    got no result in time, 2 when the file cannot be read."""
    text = _read(args.file)
    entries, unread = read_entries(raw_entries(text, file_format(args.file, args.format)), args.tenant)
    tenants = {entry.tenant for entry in entries} | ({args.tenant} if args.tenant else set())
    with SchedulerClient(args.bootstrap, args.prefix, args.timeout, linger_ms=BULK_LINGER_MS,
                         client_config=client_log(args)) as client:
        live = {(s["tenant"], s["schedule_id"]): s for tenant in sorted(tenants) for s in client.list(tenant)}
        plan = plan_apply(entries, unread, live, args.prune, tenants, int(time.time() * 1000))
        if not args.dry_run:
            _execute(client, plan)
    emit(args, plan_json(plan, args.dry_run), lambda _: plan_text(plan, args.dry_run))
    if any(r.reason == "TIMEOUT" for r in plan.rejections):
        return EXIT_UNAVAILABLE
    return EXIT_REJECTED if plan.rejections else EXIT_OK


def _read(path: str) -> str:
    if path == "-":
        return sys.stdin.read()
    try:
        with open(path, encoding="utf-8") as source:
            return source.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise ValidationError("USAGE", f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from exc


def _execute(client: SchedulerClient, plan: ApplyPlan) -> None:
    """Sends the plan's commands, many in flight; a change refused (or unanswered) moves from the plan's
    changes to its rejections."""
    creates = [c for c in plan.changes if c.action == "create"]
    others = [c for c in plan.changes if c.action != "create"]
    failed: list[tuple[Change, str, str]] = []
    for index, result in client.create_stream(CreateRequest(c.tenant, c.spec or {}, c.schedule_id) for c in creates):
        if result["status"] != "ACCEPTED":
            failed.append((creates[index], result["reason"] or "UNKNOWN", result["message"] or ""))
    sent: dict[str, Change] = {}
    for change in others:
        spec = {"spec": change.spec} if change.action == "update" else {}
        try:
            sent[client.send(COMMAND_TYPES[change.action], change.schedule_id, change.tenant,
                             expected_version=change.version, **spec)] = change
        except SchedulerError as exc:  # refused locally (the spec checked again as it is sent)
            failed.append((change, exc.reason, exc.message))
    results = _collect(client, set(sent))
    for command_id, change in sent.items():
        outcome = results.get(command_id)
        if outcome is None:
            failed.append((change, "TIMEOUT", f"no result for command {command_id} in time"))
        elif outcome["status"] != "ACCEPTED":
            failed.append((change, outcome["reason"] or "UNKNOWN", outcome["message"] or ""))
    for change, reason, message in failed:
        plan.changes.remove(change)
        plan.rejections.append(Rejection(change.line or 0, reason, message, change.tenant, change.schedule_id))


def _collect(client: SchedulerClient, command_ids: set[str]) -> dict[str, Record]:
    """The results of `command_ids` that come within the client's timeout; the others are given up on."""
    client.producer.flush(client.timeout_s)
    deadline = time.monotonic() + client.timeout_s
    results: dict[str, Record] = {}
    while len(results) < len(command_ids) and (left := deadline - time.monotonic()) > 0:
        results.update(client.take_results(command_ids - results.keys(), min(left, 0.5)))
    client.forget(command_ids - results.keys())
    return results


def _json_value(value: Any) -> Any:
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return {"base64": base64.b64encode(value).decode()}
    return value


def plan_json(plan: ApplyPlan, dry_run: bool) -> Record:
    return {
        "dry_run": dry_run, "lines": plan.lines, "unchanged": plan.unchanged,
        **{VERBS_DONE[action]: n for action, n in plan.counts().items()},
        "rejected": len(plan.rejections), "prune_skipped": plan.prune_skipped,
        "changes": [{"action": c.action, "tenant": c.tenant, "schedule_id": c.schedule_id, "line": c.line,
                     "version": c.version,
                     "diff": {name: [_json_value(b), _json_value(a)] for name, (b, a) in c.diff.items()}}
                    for c in plan.changes],
        "rejections": [vars(r) for r in sorted(plan.rejections, key=lambda r: r.line)],
    }


def plan_text(plan: ApplyPlan, dry_run: bool) -> str:
    rows = ["dry run, nothing sent:"] if dry_run else []
    for change in plan.changes:
        where = f"line {change.line}" if change.line is not None else "not in the file"
        version = f" v{change.version}" if change.version is not None else ""
        rows.append(f"{change.action:<8} {change.tenant}/{change.schedule_id}{version} ({where})")
        rows += [f"    {name}: {spec_value_text(name, before)} -> {spec_value_text(name, after)}"
                 for name, (before, after) in change.diff.items()]
    rows += [f"line {r.line}: REJECTED {r.reason}: {r.message}" + (f" (schedule {r.tenant}/{r.schedule_id})"
                                                                   if r.schedule_id else "")
             for r in sorted(plan.rejections, key=lambda r: r.line)]
    if plan.prune_skipped:
        rows.append("prune skipped: some entries could not be read, and their schedules would have been pruned")
    counts = plan.counts()
    if not plan.changes and not plan.rejections:
        rows.append(f"{plan.lines} entries: nothing to do ({plan.unchanged} unchanged)")
    else:
        done = ", ".join(f"{n} {'to be ' if dry_run else ''}{VERBS_DONE[action]}" for action, n in counts.items()
                         if n or action in ("create", "update"))
        rows.append(f"{plan.lines} entries: {done}, {plan.unchanged} unchanged, {len(plan.rejections)} rejected")
    return "\n".join(rows)


def schedules_export(args: argparse.Namespace) -> int:
    """The live schedules of `--tenant` (default: every tenant) as an apply file on stdout."""
    with client_for(args) as client:
        tenants = [args.tenant] if args.tenant else client.tenants_with_schedules()
        states = [s for tenant in tenants for s in client.list(tenant)]
    sys.stdout.write(export_text(states, args.format))
    return EXIT_OK


def register(verbs: argparse._SubParsersAction, tenant_default: str | None) -> None:
    """`apply` and `export` among the `schedules` verbs."""
    apply = add(verbs, "apply", schedules_apply,
                "make the schedules of a file (JSON Lines or YAML) so: create, update, leave, --prune the rest")
    apply.add_argument("-f", "--file", required=True, help="the file (- for stdin): what `schedules export` writes")
    apply.add_argument("--format", choices=FORMATS, help="default: yaml for .yaml/.yml files, else jsonl")
    apply.add_argument("--tenant", default=tenant_default,
                       help="the tenant of entries without one; with --prune, a tenant to prune even if no entry "
                            "names it (default $SCHEDULER_TENANT)")
    apply.add_argument("--dry-run", action="store_true", help="print what would change (with each diff); send nothing")
    apply.add_argument("--prune", nargs="?", const="cancel", choices=PRUNE_ACTIONS,
                       help="cancel (the default) or pause the live schedules of the file's tenants it does not list")
    output_arg(apply)
    export = add(verbs, "export", schedules_export, "write the live schedules as the file `schedules apply` reads")
    export.add_argument("--tenant", default=tenant_default, help="default $SCHEDULER_TENANT, else every tenant")
    export.add_argument("--format", choices=FORMATS, default="jsonl", help="jsonl (the default) or yaml")
