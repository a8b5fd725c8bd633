"""What every control subcommand shares: connection flags, the default tenant, output (text, `--json`, `-o`), instants
read in the command's `--tz`, and errors mapped to the exit codes scripts rely on (docs/cli.md)."""
from __future__ import annotations

import argparse
import base64
import json
import os
import sys
from collections.abc import Callable
from typing import Any

from confluent_kafka import KafkaException

from scheduler.cli_support import (
    EXIT_BAD_INPUT,
    EXIT_CONFLICT,
    EXIT_FINDING,
    EXIT_FORBIDDEN,
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_UNAVAILABLE,
    kafka_exit_code,
)
from scheduler.config import TENANT_ENV, Settings
from scheduler.control.client import (
    Conflict,
    NotFound,
    QuotaExceeded,
    SchedulerClient,
    SchedulerError,
    Unavailable,
    ValidationError,
)
from scheduler.control.specs import SPEC_INSTANT_FIELDS
from scheduler.kafka.client_config import add_client_config, client_config_of
from scheduler.kafka.views import ViewUnavailable
from scheduler.timing.cli_values import duration_type, format_duration_ms, resolve_instants
from scheduler.timing.instants import format_utc, to_datetime

Record = dict[str, Any]
OUTPUTS = ("table", "json", "jsonl")

# The control commands' names for the one exit-code table (scheduler/cli_support.py, docs/cli.md).
EXIT_ERROR, EXIT_USAGE, EXIT_QUOTA = EXIT_FINDING, EXIT_BAD_INPUT, EXIT_FORBIDDEN
EXIT_REJECTED = EXIT_ERROR  # `schedules import`: some lines were rejected (the others went in): its finding
EXIT_BY_ERROR: tuple[tuple[type[SchedulerError], int], ...] = (
    (ValidationError, EXIT_USAGE), (NotFound, EXIT_NOT_FOUND), (Conflict, EXIT_CONFLICT),
    (QuotaExceeded, EXIT_QUOTA), (Unavailable, EXIT_UNAVAILABLE),
)


def utc(ms: int | None) -> str:
    return "-" if ms is None else format_utc(to_datetime(ms))


def spec_value_text(name: str, value: Any) -> str:
    """A spec field's value as people write it: durations as `5m`, instants in RFC 3339, text quoted."""
    if value is None:
        return "-"
    if isinstance(value, bytes):
        try:
            return repr(value.decode("utf-8"))
        except UnicodeDecodeError:
            return f"base64:{base64.b64encode(value).decode()}"
    if name in SPEC_INSTANT_FIELDS:
        return utc(value)
    if name.endswith("_ms"):
        return format_duration_ms(value)
    return repr(value) if isinstance(value, str) else str(value)


def common_args(parser: argparse.ArgumentParser) -> None:
    settings = Settings.from_env()
    parser.add_argument("--bootstrap", default=settings.bootstrap_servers, help="Kafka bootstrap servers")
    parser.add_argument("--prefix", default=settings.topic_prefix, help="topic prefix")
    parser.add_argument("--timeout", type=duration_type("s", bare_unit="s"), default=30.0,
                        help="how long to wait for a result: a duration, or seconds (default 30s)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    add_client_config(parser)


def output_arg(parser: argparse.ArgumentParser) -> None:
    """`-o` of the listing commands, whose rows line-oriented tools want one per line (`--json` is `-o json`)."""
    parser.add_argument("-o", "--output", choices=OUTPUTS, default="table",
                        help="table (for people, the default), json (one document) or jsonl (one line per row)")


def client_log(args: argparse.Namespace) -> dict[str, str]:
    """Client settings for the command's Kafka clients: those of --client-config (or $SCHEDULER_CLIENT_CONFIG),
    and quiet logs. librdkafka logs every failed connection attempt on stderr (hundreds of lines while a command
    waits for an unreachable broker), where the command's one error line already says what failed: its own log
    is shown only with `--verbose`."""
    return {**client_config(args), **({} if args.verbose else {"log_level": "0"})}


def client_config(args: argparse.Namespace) -> dict[str, str]:
    """The settings of --client-config (or $SCHEDULER_CLIENT_CONFIG); a bad file is a usage error."""
    try:
        return client_config_of(args)
    except (ValueError, OSError) as exc:
        raise ValidationError("USAGE", f"--client-config: {exc}") from exc


def tenant_arg(parser: argparse.ArgumentParser) -> None:
    """`--tenant`, defaulting to $SCHEDULER_TENANT; `guarded` refuses the command when neither is given."""
    parser.add_argument("--tenant", default=os.environ.get(TENANT_ENV) or None,
                        help=f"the tenant (default ${TENANT_ENV})")
    parser.set_defaults(tenant_required=True)


def emit(args: argparse.Namespace, data: Any, human: Callable[[Any], str]) -> int:
    """`data` as `-o` asks: jsonl is a list's rows one per line (a single record is one line), for `jq -c`
    pipelines and line-oriented tools."""
    mode = output_mode(args)
    if mode == "jsonl":
        rows = data if isinstance(data, list) else [data]
        print("\n".join(json.dumps(row, default=str) for row in rows))
    else:
        print(json.dumps(data, indent=2, default=str) if mode == "json" else human(data))
    return EXIT_OK


def output_mode(args: argparse.Namespace) -> str:
    """`-o`'s choice; `--json`, which scripts have used since the first release, is `-o json`."""
    return "json" if getattr(args, "json", False) else getattr(args, "output", "table")


def table_text(headers: tuple[str, ...], rows: list[tuple[object, ...]], empty: str) -> str:
    """Rows in aligned columns under their headers, for people (`-o table`); `empty` when there are none."""
    if not rows:
        return empty
    cells = [headers, *[tuple(str(cell) for cell in row) for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = ("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=False)) for row in cells)
    return "\n".join(line.rstrip() for line in lines)


def result_text(result: Record) -> str:
    fires = ", ".join(utc(ms) for ms in result.get("next_fires_ms") or []) or "-"
    return (f"{result['command_type']} {result['schedule_id']}: {result['status']} version {result['version']}; "
            f"next fires: {fires}")


def guarded(fn: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """Maps errors to exit codes, and prints them as text or JSON: one line, never a traceback."""
    def run(args: argparse.Namespace) -> int:
        if getattr(args, "tenant_required", False) and not args.tenant:
            return fail(args, "USAGE", f"no tenant: give --tenant T or set {TENANT_ENV}", EXIT_USAGE)
        try:
            resolve_instants(args, getattr(args, "time_zone", None))
        except ValueError as exc:
            return fail(args, "USAGE", str(exc), EXIT_USAGE)
        try:
            return fn(args)
        except SchedulerError as exc:
            code = next((c for kind, c in EXIT_BY_ERROR if isinstance(exc, kind)), EXIT_ERROR)
            return fail(args, exc.reason, exc.message, code)
        except ViewUnavailable as exc:
            return fail(args, "UNAVAILABLE", str(exc), EXIT_UNAVAILABLE)
        except KafkaException as exc:  # not mapped to a reason by the client (e.g. a view's first metadata)
            error = exc.args[0]
            return fail(args, error.name(), f"{error.str()} (Kafka at {args.bootstrap})",
                        kafka_exit_code(exc, EXIT_ERROR))
    return run


def fail(args: argparse.Namespace, reason: str, message: str, code: int) -> int:
    if output_mode(args) != "table":
        print(json.dumps({"code": reason, "message": message}))
    print(f"error: {reason}: {message}", file=sys.stderr)
    return code


def client_for(args: argparse.Namespace) -> SchedulerClient:
    return SchedulerClient(args.bootstrap, args.prefix, args.timeout, client_config=client_log(args))


def command(args: argparse.Namespace, call: Callable[[SchedulerClient], Record]) -> int:
    with client_for(args) as client:
        result = call(client)
    return emit(args, result, result_text)


def add(group: argparse._SubParsersAction, name: str, handler: Callable[[argparse.Namespace], int],
         help_text: str) -> argparse.ArgumentParser:
    parser = group.add_parser(name, help=help_text, description=help_text)
    common_args(parser)
    parser.add_argument("--verbose", action="store_true", help="also show the Kafka client's own log (librdkafka)")
    parser.set_defaults(handler=guarded(handler))
    return parser
