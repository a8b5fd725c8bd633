"""`scheduler preview`: the next fire instants of a schedule, one RFC 3339 UTC instant per line.

With --every the anchor is --start and fires are start + k * period strictly after
--start. --cron, --rrule and --every preview from --start (default: now). --at without
--start lists the one-shot's instants whatever the current time. --calendar prints
the same fires as month grids in --tz with DST changes flagged (--json, if also
given, wins: its output never changes). Invalid input exits with status 2 and
`error: <field>: <message>` on stderr; so does a spec the engine would refuse for having no fire
within the search horizon (timing/horizon.py), instead of printing nothing.
"""
from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime

from scheduler.timing import calendar_view
from scheduler.timing.cli_values import parse_instant_ms
from scheduler.timing.cron import MONTH_END_OPTIONS
from scheduler.timing.dst import GAP_OPTIONS, OVERLAP_OPTIONS
from scheduler.timing.errors import SpecError
from scheduler.timing.fires import Fire, excluded_between, next_fires, require_fire
from scheduler.timing.instants import UTC, format_offset, format_utc, to_datetime, utc_offset
from scheduler.timing.spec import parse_spec
from scheduler.timing.zones import load_zone

_EARLIEST = datetime(1, 1, 2, tzinfo=UTC)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("preview", help="print the next fire instants of a schedule", description=__doc__)
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
    parser.add_argument("--calendar", action="store_true",
                        help="month grids in --tz: * marks fire days, ! days the UTC offset changes")
    parser.set_defaults(handler=run)


def _instant_arg(field: str, text: str | None, zone_name: str) -> datetime | None:
    """The command line's instant grammar (cli_values), reported as the spec field it sets."""
    if text is None:
        return None
    try:
        return to_datetime(parse_instant_ms(text, zone_name))
    except ValueError as exc:
        raise SpecError(field, str(exc)) from exc


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


def run(args: argparse.Namespace) -> int:
    try:
        if args.count < 0:
            raise SpecError("count", "must not be negative")
        start = _instant_arg("start_at", args.start, args.tz)
        end = _instant_arg("end_at", args.end, args.tz)
        if args.every is not None:
            kind, expression = "rate", args.every if args.every.lower().startswith("every") else f"every {args.every}"
        elif args.cron is not None:
            kind, expression = "cron", args.cron
        elif args.rrule is not None:
            kind, expression = "rrule", args.rrule
        else:
            kind, expression = "once", args.at
        if start is None and kind != "once":
            start = datetime.now(UTC)
        spec = parse_spec(
            kind,
            expression,
            args.tz,
            start_at=None if kind == "once" else start,
            end_at=end,
            max_fires=args.max_fires,
            dst_gap=args.dst_gap,
            dst_overlap=args.dst_overlap,
            month_end=args.month_end,
        )
        fires = next_fires(spec, start or _EARLIEST, args.count)
        if not fires and args.count:
            require_fire(spec, start or _EARLIEST)  # the engine would refuse it: say why, as it would
    except SpecError as exc:
        print(f"error: {exc.field}: {exc.message}", file=sys.stderr)
        return 2
    if args.calendar and not args.json:
        excluded = excluded_between(spec, start, fires[-1].scheduled_for) if fires and start else []
        print("\n".join(calendar_view.render(fires, args.tz, start, excluded)))
        return 0
    for fire in fires:
        print(_json_line(fire, args.tz) if args.json else format_utc(fire.scheduled_for))
    return 0
