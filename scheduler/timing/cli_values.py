"""The command line's one grammar for durations and instants (docs/cli.md), shared by every `scheduler`
subcommand so that `5m` or `2026-05-04T09:00:00Z` mean the same thing after any flag.

Durations: a number with a unit, `500ms`, `90s`, `5m`, `1h`, `1d`, or a sum of them (`1h30m`), the grammar
`--every` has always used. A flag that took a bare number before (seconds for `--timeout`) still takes
one, in its old unit, so existing scripts keep working.

Instants: RFC 3339 with an offset or `Z`, epoch milliseconds, or a local date-time (no offset) read in
the command's `--tz`. A local time the zone skips (DST gap) or repeats (DST overlap) is refused with
both readings named: an instant must be exactly one point in time, and an offset says which.

Pure: argparse types raise ArgumentTypeError (argparse turns it into a usage error, exit 2), the rest
ValueError; nothing here reads the clock.
"""
from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from scheduler.timing.errors import SpecError
from scheduler.timing.instants import UTC, format_offset, parse_datetime_text, to_ms, utc_offset
from scheduler.timing.zones import load_zone

MS_PER_UNIT: dict[str, int] = {"ms": 1, "s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
DURATION_FORMS = "500ms|90s|5m|1h|1d, or a sum such as 1h30m"
INSTANT_FORMS = "RFC 3339 with an offset or Z, epoch ms, or a local date-time with --tz"
MAX_MS = 2**63 - 1  # the wire's long
_NUMBER = r"(?:\d+(?:\.\d*)?|\.\d+)"  # what float() took for the old seconds flags, bar signs and exponents
_PART = re.compile(rf"({_NUMBER})(ms|s|m|h|d)")
_BARE = re.compile(_NUMBER)
_EPOCH_MS = re.compile(r"-?\d+")


def parse_duration(text: str, bare_unit: str | None = None) -> Decimal:
    """Milliseconds of `text`, exactly (a Decimal: `1.5s` is 1500). A bare number is read in `bare_unit`
    when the flag had one before, and refused otherwise: `--max-lateness 5` could mean 5 ms or 5 minutes."""
    value = text.strip().lower()
    if bare_unit is not None and _BARE.fullmatch(value):
        ms = Decimal(value) * MS_PER_UNIT[bare_unit]
    else:
        parts = _PART.findall(value)
        if not value or "".join(number + unit for number, unit in parts) != value:
            raise ValueError(f"not a duration: {text!r} (give {DURATION_FORMS})")
        ms = sum((Decimal(number) * MS_PER_UNIT[unit] for number, unit in parts), Decimal(0))
    if ms > MAX_MS:
        raise ValueError(f"duration too long: {text!r} (at most {MAX_MS} ms)")
    return ms


def parse_duration_ms(text: str, bare_unit: str | None = None) -> int:
    """Whole milliseconds of `text`: what the specs and the engine count in (`1.5ms` is refused)."""
    ms = parse_duration(text, bare_unit)
    if ms != ms.to_integral_value():
        raise ValueError(f"not a whole number of milliseconds: {text!r}")
    return int(ms)


def duration_type(unit: str = "ms", bare_unit: str | None = None) -> Callable[[str], int | float]:
    """An argparse `type=`: the duration in `unit` (int for ms, float otherwise, what the flag's consumer
    takes); a bare number in `bare_unit`, for a flag that took one before."""
    def convert(text: str) -> int | float:
        try:
            if unit == "ms":
                return parse_duration_ms(text, bare_unit)
            return float(parse_duration(text, bare_unit) / MS_PER_UNIT[unit])
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from exc
    convert.__name__ = "duration"
    return convert


@dataclass(frozen=True)
class LocalTime:
    """An instant argument without an offset: a wall-clock time, resolved once the zone (`--tz`) is known."""
    text: str
    wall: datetime


def resolve_local(wall: datetime, zone_name: str, text: str | None = None) -> int:
    """Epoch ms of the naive `wall` time in `zone_name`; a time the zone skips or repeats is refused,
    naming the offsets that would make it one instant (the rule docs/cli.md states)."""
    shown = text or wall.isoformat()
    try:
        zone = load_zone(zone_name)
    except SpecError as exc:
        raise ValueError(f"{shown}: {exc.message}") from exc
    readings: list[datetime] = []
    for fold in (0, 1):
        aware = wall.replace(tzinfo=zone, fold=fold)
        back = aware.astimezone(UTC).astimezone(zone).replace(tzinfo=None)
        if back == wall and aware.utcoffset() not in [r.utcoffset() for r in readings]:
            readings.append(aware)
    if not readings:
        raise ValueError(f"{shown} does not exist in {zone_name} (the clocks skip it, DST gap): give an offset or Z")
    if len(readings) > 1:
        both = " or ".join(wall.isoformat() + format_offset(utc_offset(r)) for r in readings)
        raise ValueError(f"{shown} happens twice in {zone_name} (DST overlap): give an offset, {both}")
    return to_ms(readings[0])


def read_instant(text: str) -> int | LocalTime:
    """Epoch ms of an RFC 3339 instant with an offset or of epoch ms; a LocalTime for a date-time without
    an offset (it needs a zone)."""
    value = text.strip()
    if _EPOCH_MS.fullmatch(value):
        ms = int(value)
        if not -MAX_MS - 1 <= ms <= MAX_MS:
            raise ValueError(f"epoch ms out of range: {text!r}")
        return ms
    try:
        parsed = parse_datetime_text(value)
    except ValueError:
        raise ValueError(f"not an instant: {text!r} (give {INSTANT_FORMS})") from None
    if parsed.tzinfo is None:
        return LocalTime(text, parsed)
    return to_ms(parsed)


def parse_instant_ms(text: str, zone_name: str | None = None) -> int:
    """Epoch ms of any instant form; a local date-time needs `zone_name`."""
    value = read_instant(text)
    if isinstance(value, LocalTime):
        if zone_name is None:
            raise ValueError(f"{text!r} has no offset: add one (or Z), or give --tz")
        return resolve_local(value.wall, zone_name, text)
    return value


def instant_type(text: str) -> int | LocalTime:
    """An argparse `type=`: epoch ms, or a LocalTime that `resolve_instants` turns into ms with --tz."""
    try:
        return read_instant(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


instant_type.__name__ = "instant"


def resolve_instants(args: argparse.Namespace, zone_name: str | None) -> None:
    """Every LocalTime left in `args` by `instant_type`, as epoch ms in `zone_name` (ValueError if it
    cannot be: no zone, or a DST gap or overlap)."""
    for name, value in vars(args).items():
        if isinstance(value, LocalTime):
            setattr(args, name, parse_instant_ms(value.text, zone_name))
