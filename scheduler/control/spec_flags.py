"""The spec's command-line flags, derived from the ScheduleSpec schema: one set for every command that takes
a spec (`schedules create/update/preview`), so a field added to the schema is a flag everywhere at once.

argparse dest = the field's name; instants take the instant grammar, the `*_ms` fields the duration grammar
(`--lease 30s`, with `--lease-ms 30000` a deprecated alias), enums their choices in any case.
"""
from __future__ import annotations

import argparse
from typing import Any

from scheduler.cli_support import add_renamed
from scheduler.timing.cli_values import duration_type, instant_type
from scheduler.wire import vocabulary

Record = dict[str, Any]

SPEC_INSTANT_FLAGS = {"start": "start_at_ms", "end": "end_at_ms", "anchor": "anchor_at_ms"}
SPEC_INT_FLAGS = tuple(name for name in vocabulary.integer_fields("ScheduleSpec")
                       if name not in SPEC_INSTANT_FLAGS.values())
SPEC_DURATION_FLAGS = tuple(name for name in SPEC_INT_FLAGS if name.endswith("_ms"))
SPEC_CHOICE_FLAGS = {name: vocabulary.choices(enum) for name, enum in vocabulary.enum_fields("ScheduleSpec").items()
                     if name != "kind"}


def spec_args(parser: argparse.ArgumentParser, kind_required: bool) -> None:
    kind = parser.add_mutually_exclusive_group(required=kind_required)
    kind.add_argument("--cron", help='five-field cron expression, e.g. "0 9 * * MON-FRI"')
    kind.add_argument("--every", help="fixed rate, e.g. 90m (anchored at --anchor, default: creation)")
    kind.add_argument("--at", help="one-shot: an RFC 3339 instant or a local date-time in --tz")
    kind.add_argument("--rrule", help='RFC 5545 rule, e.g. "DTSTART:20260113T090000 RRULE:FREQ=MONTHLY;BYDAY=2TU"')
    parser.add_argument("--tz", dest="time_zone",
                        help="IANA time zone (default UTC); also the zone of instants given without an offset")
    for flag in SPEC_INSTANT_FLAGS:
        parser.add_argument(f"--{flag}", type=instant_type,
                            help=f"{flag} instant (RFC 3339, epoch ms, or local in --tz)")
    for name in SPEC_INT_FLAGS:
        flag = f"--{name.replace('_', '-')}"
        if name in SPEC_DURATION_FLAGS:
            add_renamed(parser, flag[:-3], flag, name, duration_type(), int, "a duration, e.g. 5m", "5m")
        else:
            parser.add_argument(flag, dest=name, type=int)
    for name, choices in SPEC_CHOICE_FLAGS.items():
        parser.add_argument(f"--{name.replace('_', '-')}", dest=name, type=str.upper, choices=choices)
    parser.add_argument("--payload", help="payload (UTF-8 text)")


def spec_fields(args: argparse.Namespace) -> Record:
    """The spec fields given on the command line (nothing else)."""
    fields: Record = {}
    if args.cron is not None:
        fields.update(kind="CRON", expression=args.cron)
    elif args.every is not None:
        fields.update(kind="RATE", expression=rate_expression(args.every))
    elif args.at is not None:
        fields.update(kind="ONCE", expression=args.at)
    elif args.rrule is not None:
        fields.update(kind="RRULE", expression=args.rrule)
    for name in ("time_zone", *SPEC_INT_FLAGS, *SPEC_CHOICE_FLAGS):
        if getattr(args, name) is not None:
            fields[name] = getattr(args, name)
    for flag, name in SPEC_INSTANT_FLAGS.items():
        if getattr(args, flag) is not None:
            fields[name] = getattr(args, flag)
    if args.payload is not None:
        fields["payload"] = args.payload.encode()
    return fields


def rate_expression(every: str) -> str:
    """`--every 90m` as the spec's expression (`every 90m`); `--every "every 90m"` is taken as written."""
    return every if every.lower().startswith("every") else f"every {every}"
