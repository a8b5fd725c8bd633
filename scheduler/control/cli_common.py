"""What every control subcommand shares: connection flags, output (text or `--json`), and errors mapped to the
exit codes scripts rely on (listed in scheduler/control/cli.py)."""
from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any

from confluent_kafka import KafkaException

from scheduler.config import Settings
from scheduler.control.client import (
    Conflict,
    NotFound,
    QuotaExceeded,
    SchedulerClient,
    SchedulerError,
    Unavailable,
    ValidationError,
)
from scheduler.kafka.views import ViewUnavailable
from scheduler.timing.instants import format_utc, parse_instant, to_datetime, to_ms

Record = dict[str, Any]

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_NOT_FOUND, EXIT_CONFLICT, EXIT_QUOTA, EXIT_UNAVAILABLE = 0, 1, 2, 3, 4, 5, 6
EXIT_REJECTED = 7  # `schedules import`: some lines were rejected (the others went in)
EXIT_BY_ERROR: tuple[tuple[type[SchedulerError], int], ...] = (
    (ValidationError, EXIT_USAGE), (NotFound, EXIT_NOT_FOUND), (Conflict, EXIT_CONFLICT),
    (QuotaExceeded, EXIT_QUOTA), (Unavailable, EXIT_UNAVAILABLE),
)


def instant_ms(text: str) -> int:
    """An RFC 3339 instant, or epoch milliseconds."""
    if text.lstrip("-").isdigit():
        return int(text)
    try:
        return to_ms(parse_instant(text))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not an RFC 3339 instant nor epoch ms: {text!r} ({exc})") from exc


def utc(ms: int | None) -> str:
    return "-" if ms is None else format_utc(to_datetime(ms))


def common_args(parser: argparse.ArgumentParser) -> None:
    settings = Settings.from_env()
    parser.add_argument("--bootstrap", default=settings.bootstrap_servers, help="Kafka bootstrap servers")
    parser.add_argument("--prefix", default=settings.topic_prefix, help="topic prefix")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for a result")
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def client_log(args: argparse.Namespace) -> dict[str, str]:
    """Client settings for the command's Kafka clients. librdkafka logs every failed connection attempt on
    stderr (hundreds of lines while a command waits for an unreachable broker), where the command's one error
    line already says what failed: its own log is shown only with `--verbose`."""
    return {} if args.verbose else {"log_level": "0"}


def tenant_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tenant", required=True)


def emit(args: argparse.Namespace, data: Any, human: Callable[[Any], str]) -> int:
    print(json.dumps(data, indent=2, default=str) if args.json else human(data))
    return EXIT_OK


def result_text(result: Record) -> str:
    fires = ", ".join(utc(ms) for ms in result.get("next_fires_ms") or []) or "-"
    return f"{result['command_type']} {result['schedule_id']}: {result['status']} version {result['version']}; next fires: {fires}"


def guarded(fn: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """Maps errors to exit codes, and prints them as text or JSON: one line, never a traceback."""
    def run(args: argparse.Namespace) -> int:
        try:
            return fn(args)
        except SchedulerError as exc:
            code = next((c for kind, c in EXIT_BY_ERROR if isinstance(exc, kind)), EXIT_ERROR)
            return fail(args, exc.reason, exc.message, code)
        except ViewUnavailable as exc:
            return fail(args, "UNAVAILABLE", str(exc), EXIT_UNAVAILABLE)
        except KafkaException as exc:  # not mapped to a reason by the client (e.g. a view's first metadata)
            error = exc.args[0]
            return fail(args, error.name(), f"{error.str()} (Kafka at {args.bootstrap})", EXIT_ERROR)
    return run


def fail(args: argparse.Namespace, reason: str, message: str, code: int) -> int:
    if args.json:
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
