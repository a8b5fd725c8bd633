"""The next fires of a schedule, computed locally: `scheduler schedules preview`, and `scheduler preview`, its
alias from the time core's first release.

Both names build the spec with the same flags' meaning, compile it and count its fires through one path
(`control.specs.preview_fires`), so they never disagree on an instant. The alias keeps the output and
defaults scripts have relied on since that release: one RFC 3339 UTC instant per line; `--json` one object
per line with the local time, offset and DST rule; `--start` both the spec's start and the instant fires
come strictly after; `--tz` UTC by default; invalid input `error: <field>: <message>` on stderr with
status 2. `schedules preview` speaks the control grammar (`-o`, `--after`, a stored schedule by id,
errors as every control command prints them). Both print `--calendar` month grids.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from scheduler.config import TENANT_ENV
from scheduler.control.cli_common import add, client_for, emit, output_arg, output_mode, utc
from scheduler.control.errors import ValidationError
from scheduler.control.spec_flags import rate_expression, spec_args, spec_fields
from scheduler.control.specs import make_spec, preview_fires
from scheduler.timing import calendar_view, instants
from scheduler.timing.cli_values import instant_type, parse_instant_ms
from scheduler.timing.cron import MONTH_END_OPTIONS
from scheduler.timing.dst import GAP_OPTIONS, OVERLAP_OPTIONS
from scheduler.timing.fires import Fire, excluded_between
from scheduler.timing.instants import UTC, format_offset, format_utc, utc_offset
from scheduler.timing.spec import ScheduleSpec
from scheduler.timing.zones import load_zone

ALIAS_HELP = "print the next fire instants of a schedule (alias of `schedules preview`, its own output)"
# `--at` without `--start` lists the one-shot's instants whatever the current time.
_EARLIEST_MS = instants.to_ms(datetime(1, 1, 2, tzinfo=UTC))


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`scheduler preview`, the alias."""
    parser = subparsers.add_parser("preview", help=ALIAS_HELP, description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    kind = parser.add_mutually_exclusive_group(required=True)
    kind.add_argument("--cron", help='five-field cron expression or macro, e.g. "30 2 * * *"')
    kind.add_argument("--every", help="fixed rate, e.g. 90m, 24h, 1h30m (anchored at --start)")
    kind.add_argument("--at", help="one-shot: an RFC 3339 instant, or a local date-time in --tz")
    kind.add_argument("--rrule", help='RFC 5545 rule, DTSTART local in --tz, e.g. '
                                      '"DTSTART:20260113T090000 RRULE:FREQ=MONTHLY;BYDAY=2TU EXDATE:20261208"')
    parser.add_argument("--tz", default="UTC", help="IANA time zone of cron / rrule / local one-shot (default UTC)")
    parser.add_argument("--start", help="instant (RFC 3339, epoch ms, or local in --tz); fires strictly after it "
                                        "(default: now)")
    parser.add_argument("--end", help="instant (RFC 3339, epoch ms, or local in --tz); no fires after it")
    parser.add_argument("--count", type=int, default=10, help="how many fires to print (default 10)")
    parser.add_argument("--max-fires", type=int, help="the schedule's maximum number of fires")
    parser.add_argument("--dst-gap", default="skip", choices=GAP_OPTIONS)
    parser.add_argument("--dst-overlap", default="first", choices=OVERLAP_OPTIONS)
    parser.add_argument("--month-end", default="skip", choices=MONTH_END_OPTIONS,
                        help="cron/rrule day-of-month past a month's end: skip the month or clamp to its last day")
    parser.add_argument("--json", action="store_true", help="one JSON object per line with local time and offset")
    _calendar_arg(parser)
    parser.set_defaults(handler=run_alias)


def register_verb(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`scheduler schedules preview`."""
    prev = add(verbs, "preview", schedules_preview, "next fires of a schedule or of a spec (local)")
    prev.add_argument("schedule_id", nargs="?")
    prev.add_argument("--tenant", default=os.environ.get(TENANT_ENV) or None,
                      help=f"the stored schedule's tenant (default ${TENANT_ENV})")
    prev.add_argument("--count", type=int, default=10)
    output_arg(prev)
    _calendar_arg(prev)
    prev.add_argument("--after", type=instant_type, help="fires strictly after this instant (default: now)")
    spec_args(prev, kind_required=False)


def _calendar_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--calendar", action="store_true",
                        help="month grids in --tz: * marks fire days, ! days the UTC offset changes "
                             "(JSON output, if also asked for, wins)")


def schedules_preview(args: argparse.Namespace) -> int:
    """Of a stored schedule (with its id) or of the spec given by flags."""
    spec: Mapping[str, Any]
    if args.schedule_id is not None:
        if args.tenant is None:
            raise ValidationError("USAGE", "--tenant is required with a schedule id")
        with client_for(args) as client:
            state = client.get(args.tenant, args.schedule_id)
        spec, fired_before, must_fire = state["spec"], state["fired_count"], False
    else:
        fields = spec_fields(args)
        if "kind" not in fields:
            raise ValidationError("USAGE", "give a schedule id or one of --cron, --every, --at, --rrule")
        spec = make_spec(fields.pop("kind"), fields.pop("expression"), fields.pop("time_zone", "UTC"), **fields)
        fired_before, must_fire = 0, True
    after_ms = _now_ms() if args.after is None else args.after
    compiled, fires = preview_fires(spec, args.count, after_ms, fired_before, must_fire=must_fire)
    if args.calendar and output_mode(args) == "table":
        print(_calendar(compiled, fires, spec["time_zone"], after_ms))
        return 0
    return emit(args, [instants.to_ms(fire.scheduled_for) for fire in fires],
                lambda rows: "\n".join(utc(ms) for ms in rows))


def run_alias(args: argparse.Namespace) -> int:
    try:
        if args.count < 0:
            raise ValidationError("INVALID_SPEC", "count: must not be negative")
        start_ms = _instant_ms("start_at", args.start, args.tz)
        spec = make_spec(*_alias_kind(args), args.tz, start_at_ms=start_ms, end_at_ms=_instant_ms(
            "end_at", args.end, args.tz), max_fires=args.max_fires, dst_gap=args.dst_gap.upper(),
            dst_overlap=args.dst_overlap.upper(), month_end=args.month_end.upper())
        if args.at is not None:  # a one-shot has no start; --start only bounds which of its instants print
            spec["start_at_ms"] = None
            after_ms = _EARLIEST_MS if start_ms is None else start_ms
        else:
            after_ms = spec["start_at_ms"] = _now_ms() if start_ms is None else start_ms
        compiled, fires = preview_fires(spec, args.count, after_ms, must_fire=True)
    except ValidationError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        return 2
    if args.calendar and not args.json:
        print(_calendar(compiled, fires, args.tz, start_ms if args.at is not None else after_ms))
        return 0
    for fire in fires:
        print(_json_line(fire, args.tz) if args.json else format_utc(fire.scheduled_for))
    return 0


def _now_ms() -> int:
    return int(time.time() * 1000)


def _alias_kind(args: argparse.Namespace) -> tuple[str, str]:
    if args.every is not None:
        return "RATE", rate_expression(args.every)
    if args.cron is not None:
        return "CRON", args.cron
    if args.rrule is not None:
        return "RRULE", args.rrule
    return "ONCE", args.at


def _instant_ms(field: str, text: str | None, zone_name: str) -> int | None:
    """The command line's instant grammar (cli_values), reported as the spec field it sets."""
    if text is None:
        return None
    try:
        return parse_instant_ms(text, zone_name)
    except ValueError as exc:
        raise ValidationError("INVALID_SPEC", f"{field}: {exc}") from exc


def _calendar(spec: ScheduleSpec, fires: list[Fire], time_zone: str, after_ms: int | None) -> str:
    after = None if after_ms is None else instants.to_datetime(after_ms)
    excluded = excluded_between(spec, after, fires[-1].scheduled_for) if fires and after else []
    return "\n".join(calendar_view.render(fires, time_zone, after, excluded))


def _json_line(fire: Fire, time_zone: str) -> str:
    local = fire.scheduled_for.astimezone(load_zone(time_zone))
    return json.dumps(
        {
            "scheduled_for": format_utc(fire.scheduled_for),
            "local": local.replace(tzinfo=None).isoformat(timespec="seconds"),
            "utc_offset": format_offset(utc_offset(local)),
            "time_zone": time_zone,
            "dst_rule": fire.dst_rule,
        }
    )
