"""`scheduler schedules ...`: schedules from a terminal (`occurrences ...`: occurrence_cli.py)."""
from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable

from scheduler.api.models import schedule_json
from scheduler.cli_support import add_renamed
from scheduler.config import TENANT_ENV
from scheduler.control import apply_cli, preview_cli
from scheduler.control.bulk import BULK_LINGER_MS, DEFAULT_WINDOW
from scheduler.control.cli_common import (
    EXIT_OK,
    EXIT_REJECTED,
    EXIT_UNAVAILABLE,
    Record,
    add,
    client_for,
    client_log,
    command,
    emit,
    output_arg,
    output_mode,
    result_text,
    spec_value_text,
    tenant_arg,
    utc,
)
from scheduler.control.client import SPEC_DEFAULTS, SchedulerClient, ValidationError, make_spec
from scheduler.control.spec_flags import SPEC_CHOICE_FLAGS, spec_args, spec_fields
from scheduler.timing.cli_values import instant_type
from scheduler.wire import vocabulary
from scheduler.wire.limits import MAX_NOTE_LENGTH

MAX_PAGE = 1000  # `schedules list --limit`: the HTTP API's largest page


def _schedule_line(state: Record) -> str:
    spec = state["spec"]
    return (f"{state['schedule_id']}  {state['state']}  v{state['version']}  {spec['kind']} "
            f"{spec['expression']!r} {spec['time_zone']}  next {utc(state.get('next_fire_ms'))}")


def schedules_create(args: argparse.Namespace) -> int:
    fields = spec_fields(args)
    spec = make_spec(fields.pop("kind"), fields.pop("expression"), fields.pop("time_zone", "UTC"), **fields)
    return command(args, lambda c: c.create(args.tenant, spec, schedule_id=args.id,
                                              idempotency_key=args.idempotency_key))


def schedules_import(args: argparse.Namespace) -> int:
    """Exit 0 when every line was accepted, EXIT_REJECTED (1, the command's finding) when any was rejected,
    6 when any got no result."""
    from scheduler.control.schedule_import import import_lines, summary_text

    try:
        source = sys.stdin if args.file == "-" else open(args.file, encoding="utf-8")
    except OSError as exc:
        raise ValidationError("USAGE", f"cannot read {args.file}: {exc.strerror}") from exc
    with source, SchedulerClient(args.bootstrap, args.prefix, args.timeout, linger_ms=BULK_LINGER_MS,
                                     client_config=client_log(args)) as client:
        summary = import_lines(client, source, args.window)
    emit(args, summary.as_json(), lambda _: summary_text(summary))
    if "TIMEOUT" in summary.rejected:
        return EXIT_UNAVAILABLE
    return EXIT_REJECTED if summary.rejections else EXIT_OK


def schedules_get(args: argparse.Namespace) -> int:
    with client_for(args) as client:
        state = client.get(args.tenant, args.schedule_id)
    return emit(args, schedule_json(state), _schedule_detail)


def _schedule_detail(state: Record) -> str:
    spec = state["spec"]
    lines = [_schedule_line(state), f"  created {utc(state['created_at_ms'])}  updated {utc(state['updated_at_ms'])}"
             f"  fired {state['fired_count']}  pending {len(state['pending'])}"]
    lines += [f"  {name}: {spec_value_text(name, spec[name])}" for name in SPEC_DEFAULTS
              if name not in ("kind", "expression", "payload") and spec.get(name) is not None]
    if state.get("pause_note") is not None:
        lines.append(f"  paused: {state['pause_note']}")
    return "\n".join(lines)


def schedules_list(args: argparse.Namespace) -> int:
    """Every schedule, or with `--limit` one page: then `-o json` is the HTTP API's page, {"schedules",
    "next_after"}, and the other outputs say the next page's `--after` on stderr."""
    with client_for(args) as client:
        states = client.list(args.tenant, args.state, args.after, args.limit)
    rows = [schedule_json(s) for s in states]
    next_after = rows[-1]["schedule_id"] if args.limit is not None and len(rows) == args.limit else None
    if args.limit is not None and output_mode(args) == "json":
        return emit(args, {"schedules": rows, "next_after": next_after}, str)
    emit(args, rows, lambda shown: "\n".join(_schedule_line(s) for s in shown) or "(no schedules)")
    if next_after is not None:
        print(f"next page: --after {next_after}", file=sys.stderr)
    return EXIT_OK


def schedules_update(args: argparse.Namespace) -> int:
    """Only the given spec flags change; the rest comes from the current spec, conditional on its version."""
    with client_for(args) as client:
        current = client.get(args.tenant, args.schedule_id)
        spec = {**current["spec"], **spec_fields(args)}
        expected = current["version"] if args.expected_version is None else args.expected_version
        if args.dry_run:
            diff = client.update(args.tenant, args.schedule_id, spec, expected, dry_run=True, count=args.count)
            return emit(args, diff, _diff_text)
        result = client.update(args.tenant, args.schedule_id, spec, expected)
    return emit(args, result, result_text)


def _diff_text(diff: Record) -> str:
    rows = [f"{'before':<22}  after"]
    before, after = diff["before_ms"], diff["after_ms"]
    for i in range(max(len(before), len(after))):
        left = utc(before[i]) if i < len(before) else ""
        right = utc(after[i]) if i < len(after) else ""
        rows.append(f"{left:<22}  {right}{'' if left == right else '  *'}")
    return f"dry run of {diff['schedule_id']} v{diff['version']} ({diff['state']}), nothing sent:\n" + "\n".join(rows)


def _simple(verb: str) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        return command(args, lambda c: getattr(c, verb)(args.tenant, args.schedule_id, args.expected_version))
    return run


def schedules_pause(args: argparse.Namespace) -> int:
    return command(args, lambda c: c.pause(args.tenant, args.schedule_id, args.expected_version, note=args.note))


def schedules_trigger(args: argparse.Namespace) -> int:
    return command(args, lambda c: c.trigger_now(args.tenant, args.schedule_id, args.overlap_policy))


def schedules_backfill(args: argparse.Namespace) -> int:
    return command(args, lambda c: c.backfill(args.tenant, args.schedule_id, args.from_ms, args.to_ms,
                                               args.overlap_policy))


def _page_size(text: str) -> int:
    """--limit: the HTTP API's page bounds."""
    if not text.isdigit() or not 1 <= int(text) <= MAX_PAGE:
        raise argparse.ArgumentTypeError(f"not a page size: {text!r} (1 to {MAX_PAGE})")
    return int(text)


def _upper_choice(choices: tuple[str, ...] | list[str]) -> Callable[[str], str]:
    """An argparse type for a choice given in any case, for flags added by `add_renamed` (which takes types)."""
    def convert(text: str) -> str:
        if text.upper() not in choices:
            raise argparse.ArgumentTypeError(f"invalid choice: {text!r} (choose from {', '.join(choices)})")
        return text.upper()
    return convert


def register_schedules(subparsers: argparse._SubParsersAction, description: str) -> None:
    schedules = subparsers.add_parser("schedules", help="create and manage schedules",
                                      description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    verbs = schedules.add_subparsers(dest="verb", required=True)
    create = add(verbs, "create", schedules_create, "create a schedule")
    tenant_arg(create)
    spec_args(create, kind_required=True)
    create.add_argument("--id", help="schedule id (default: derived from --idempotency-key, else random)")
    create.add_argument("--idempotency-key")
    bulk = add(verbs, "import", schedules_import,
                "create schedules from JSON Lines, many in flight (docs/control-plane.md)")
    bulk.add_argument("file", help="JSON Lines file, one schedule a line; - for stdin")
    bulk.add_argument("--window", type=int, default=DEFAULT_WINDOW, help="commands in flight at most")
    apply_cli.register(verbs, os.environ.get(TENANT_ENV) or None)
    get = add(verbs, "get", schedules_get, "show one schedule")
    tenant_arg(get)
    get.add_argument("schedule_id")
    listing = add(verbs, "list", schedules_list, "list a tenant's schedules")
    tenant_arg(listing)
    listing.add_argument("--state", type=str.upper, choices=vocabulary.choices("ScheduleStatus"))
    listing.add_argument("--limit", type=_page_size, help="one page of at most this many (1-1000; default: all)")
    listing.add_argument("--after", help="the page after this schedule id (the `next_after` of the page before)")
    output_arg(listing)
    update = add(verbs, "update", schedules_update, "change a schedule's spec (only the flags given)")
    tenant_arg(update)
    update.add_argument("schedule_id")
    spec_args(update, kind_required=False)
    update.add_argument("--expected-version", type=int, help="default: the version read before the change")
    update.add_argument("--dry-run", action="store_true", help="show next fires before/after; send nothing")
    update.add_argument("--count", type=int, default=5, help="fires shown by --dry-run")
    for verb in ("pause", "resume", "cancel"):
        parser = add(verbs, verb, schedules_pause if verb == "pause" else _simple(verb), f"{verb} a schedule")
        tenant_arg(parser)
        parser.add_argument("schedule_id")
        parser.add_argument("--expected-version", type=int)
        if verb == "pause":
            parser.add_argument("--note", help=f"why (at most {MAX_NOTE_LENGTH} characters): shown by "
                                "`schedules get` until resumed; pausing again with a new note replaces it")
    trigger = add(verbs, "trigger", schedules_trigger, "fire one occurrence now")
    tenant_arg(trigger)
    trigger.add_argument("schedule_id")
    overlap = SPEC_CHOICE_FLAGS["overlap_policy"]
    trigger.add_argument("--overlap-policy", type=_upper_choice(overlap), metavar="POLICY",
                         help=f"this occurrence's overlap policy, one of {', '.join(overlap)} (default: the "
                              "schedule's; ALLOW runs it although one still runs)")
    backfill = add(verbs, "backfill", schedules_backfill, "replay the fires of a past range (at most 1000)")
    tenant_arg(backfill)
    backfill.add_argument("schedule_id")
    backfill.add_argument("--from", dest="from_ms", type=instant_type, required=True,
                          help="first instant (inclusive): RFC 3339, epoch ms, or local in --tz")
    backfill.add_argument("--to", dest="to_ms", type=instant_type, required=True, help="last instant (inclusive)")
    backfill.add_argument("--tz", dest="time_zone", help="IANA zone of --from/--to given without an offset")
    add_renamed(backfill, "--overlap-policy", "--overlap", "overlap_policy", _upper_choice(overlap),
                _upper_choice(overlap), f"the replayed occurrences' overlap policy, one of {', '.join(overlap)} "
                "(default: the schedule's)", "SKIP_IF_RUNNING", metavar="POLICY")
    preview_cli.register_verb(verbs)
