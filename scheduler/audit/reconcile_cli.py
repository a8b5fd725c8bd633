"""`scheduler reconcile --tenant T --from A --to B [--schedule S] [--json]`: proves from the audit ledger
that every occurrence the schedule versions called for in [A, B) was accounted for (docs/reconcile.md).
`--follow [--settle D] [--window D] [--metrics-port P]` does so continuously, window after closed window.

Exit status (docs/cli.md): 0 nothing ABSENT or UNEXPECTED; 1 some (their ids are listed); nothing could be
reconciled: 2 a bad argument (an instant without offset or --tz, from >= to), no database configured or one
without the ledger tables, a range overlapping history `scheduler audit retain` dropped; 3 a tenant or schedule
the ledger does not know; 6 an unreachable database.
With --follow: 0 when stopped by SIGTERM, 130 by Ctrl-C; 2, 3 and 6 as above when it cannot start.
"""
from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
import time
from types import FrameType
from typing import TYPE_CHECKING

import psycopg
from dateutil import parser as dateparser

from scheduler.audit.ledger import DEFAULT_BATCH
from scheduler.audit.partition_db import dropped_overlapping
from scheduler.audit.partitions import DayRange
from scheduler.audit.tables import schema_name
from scheduler.cli_support import (
    EXIT_BAD_INPUT,
    EXIT_FINDING,
    EXIT_INTERRUPTED,
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_UNAVAILABLE,
)
from scheduler.config import TENANT_ENV, Settings
from scheduler.health.endpoint import DEFAULT_BIND
from scheduler.timing.cli_values import duration_type, parse_instant_ms
from scheduler.timing.instants import to_ms

if TYPE_CHECKING:
    from scheduler.audit.ledger_reader import LedgerReader

DATABASE_ENV = "AUDIT_DATABASE_URL"
EXIT_FOUND, EXIT_UNUSABLE = EXIT_FINDING, EXIT_BAD_INPUT
DEFAULT_SETTLE_MS, DEFAULT_WINDOW_MS = 120_000, 60_000
DEFAULT_JOBS = 2


class UsageError(Exception):
    """Nothing was reconciled; the message says why, `code` the exit status."""

    def __init__(self, message: str, code: int = EXIT_UNUSABLE) -> None:
        super().__init__(message)
        self.code = code


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("reconcile", help="check the audit ledger against the schedule versions",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tenant", default=os.environ.get(TENANT_ENV) or None, required=not os.environ.get(TENANT_ENV),
                        help=f"the tenant (default ${TENANT_ENV})")
    parser.add_argument("--from", dest="from_", metavar="INSTANT",
                        help="RFC 3339 instant, epoch ms, or a local date-time in --tz (inclusive, on scheduled_for)")
    parser.add_argument("--to", metavar="INSTANT", help="the same forms (exclusive)")
    parser.add_argument("--tz", help="IANA zone of --from/--to given without an offset")
    parser.add_argument("--schedule", help="only this schedule id")
    parser.add_argument("--json", action="store_true", help="one JSON document (docs/reconcile.md) on stdout")
    parser.add_argument("--all", action="store_true", help="with --json: list every expected occurrence too")
    parser.add_argument("--batch", type=_batch, default=DEFAULT_BATCH, metavar="ROWS",
                        help=f"rows per COPY into PostgreSQL and per fetch from it (default {DEFAULT_BATCH}): "
                             "the reconciler's memory is a few batches, whatever the range")
    parser.add_argument("--jobs", type=_batch, default=DEFAULT_JOBS, metavar="N",
                        help=f"PostgreSQL sessions that classify the range's time buckets at once (default "
                             f"{DEFAULT_JOBS}; a range of one bucket uses one): up to the database's free cores")
    parser.add_argument("--follow", action="store_true",
                        help="reconcile continuously: each --window once it has been closed for --settle, from "
                             "--from if given, else from the last closed window; runs until stopped")
    parser.add_argument("--settle", type=duration_type(), default=DEFAULT_SETTLE_MS, metavar="DURATION",
                        help="with --follow: how long after a window ends it is reconciled, the sink's delay "
                             "behind the topics (default 2m)")
    parser.add_argument("--window", type=duration_type(), default=DEFAULT_WINDOW_MS, metavar="DURATION",
                        help="with --follow: the length of each window, aligned to the epoch (default 1m)")
    parser.add_argument("--metrics-port", type=int, default=0,
                        help="with --follow: serve Prometheus metrics at /metrics, and /healthz and /readyz, on "
                             "this port (0: disabled)")
    parser.add_argument("--metrics-bind", default=DEFAULT_BIND, metavar="ADDRESS",
                        help=f"address the metrics port listens on (default {DEFAULT_BIND})")
    parser.add_argument("--database-url", help=f"libpq URL or DSN of the ledger (default: ${DATABASE_ENV})")
    parser.set_defaults(handler=run)


def _batch(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def instant_ms(flag: str, text: str, zone_name: str | None = None) -> int:
    """The command line's instant grammar (timing/cli_values); other ISO 8601 forms with an offset, which this
    command took before it, still work."""
    try:
        return parse_instant_ms(text, zone_name)
    except ValueError as exc:
        grammar_error = exc
    try:
        value = dateparser.isoparse(text)
    except (ValueError, OverflowError) as exc:
        raise UsageError(f"{flag}: {grammar_error}") from exc
    if value.tzinfo is None or value.utcoffset() is None:
        raise UsageError(f"{flag}: {grammar_error}")
    return to_ms(value)


def _url(args: argparse.Namespace) -> str:
    url: str | None = args.database_url or os.environ.get(DATABASE_ENV)
    if not url:
        raise UsageError(f"no audit database: set {DATABASE_ENV} or pass --database-url")
    return url


def _open(args: argparse.Namespace, prefix: str) -> psycopg.Connection:
    url = _url(args)
    try:
        return psycopg.connect(url, connect_timeout=10)
    except psycopg.OperationalError as exc:
        raise UsageError(f"cannot reach the audit database: {str(exc).strip()}", EXIT_UNAVAILABLE) from exc


def checked_reader(conn: psycopg.Connection, prefix: str, tenant: str, schedule: str | None) -> LedgerReader:
    """The ledger's reader once its tables, the tenant and the schedule are known to be there."""
    from scheduler.audit.ledger_reader import LedgerReader

    reader = LedgerReader(conn, prefix)
    if reader.missing_tables():
        raise UsageError(f"the database has no ledger tables in schema {reader.schema!r} "
                         f"(prefix {prefix!r}): {', '.join(reader.missing_tables())}")
    if not reader.knows(tenant):
        raise UsageError(f"tenant {tenant!r} has no schedule in the ledger (schema {reader.schema!r})", EXIT_NOT_FOUND)
    if schedule is not None and not reader.knows(tenant, schedule):
        raise UsageError(f"schedule {schedule!r} of tenant {tenant!r} is not in the ledger", EXIT_NOT_FOUND)
    return reader


def refuse_dropped(conn: psycopg.Connection, schema: str, from_ms: int, to_ms: int) -> None:
    """A range overlapping history `audit retain` dropped cannot be proved: its dispatches and attempts are gone,
    so every expected occurrence there would read ABSENT."""
    dropped = dropped_overlapping(conn, schema, from_ms, to_ms)
    if dropped:
        ranges = "; ".join(f"{table} {DayRange(start, end).label()}" for table, start, end in dropped)
        raise UsageError(f"[{from_ms}, {to_ms}) overlaps ledger history dropped by `scheduler audit retain` "
                         f"({ranges}): the proof cannot be made over deleted rows; reconcile from "
                         f"{max(end for _, _, end in dropped)} on")


def _reconcile_range(args: argparse.Namespace, prefix: str) -> int:
    """One range, streamed: the verdict is written as PostgreSQL hands the answers back."""
    from scheduler.audit.stream_format import write_json, write_summary
    from scheduler.audit.streamed_report import reconcile_streamed

    if args.from_ is None or args.to is None:
        raise UsageError("--from and --to are required (or --follow)")
    from_ms, to_ms = instant_ms("--from", args.from_, args.tz), instant_ms("--to", args.to, args.tz)
    if from_ms >= to_ms:
        raise UsageError(f"--from must be before --to ({args.from_} >= {args.to})")
    with _open(args, prefix) as conn:
        reader = checked_reader(conn, prefix, args.tenant, args.schedule)
        refuse_dropped(conn, reader.schema, from_ms, to_ms)
        try:
            report = reconcile_streamed(reader, args.tenant, from_ms, to_ms, args.schedule, args.batch,
                                        jobs=args.jobs)
            scope = dict(tenant=args.tenant, schedule=args.schedule, from_ms=from_ms, to_ms=to_ms, schema=reader.schema)
            if args.json:
                write_json(sys.stdout, report, every_occurrence=args.all, **scope)
            else:
                write_summary(sys.stdout, report, **scope)
        except psycopg.OperationalError as exc:
            raise UsageError(f"lost the audit database: {str(exc).strip()}", EXIT_UNAVAILABLE) from exc
    return EXIT_OK if report.ok else EXIT_FOUND


def _follow(args: argparse.Namespace, prefix: str) -> int:
    """The online reconciler (scheduler/audit/reconcile_follow.py) until SIGTERM (0) or Ctrl-C (130)."""
    from scheduler.audit.reconcile_follow import Follower, FollowOptions, ReconcileMetrics, first_window
    from scheduler.health.endpoint import serve

    if args.json or args.all:
        raise UsageError("--json and --all describe one range: --follow prints ABSENT and UNEXPECTED lines")
    if args.to is not None:
        raise UsageError("--to ends a range: --follow has none (give --from to start in the past)")
    if args.window < 1000 or args.settle < 0:
        raise UsageError("--window must be at least 1s and --settle not negative")
    from_ms = instant_ms("--from", args.from_, args.tz) if args.from_ is not None else None
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    with _open(args, prefix) as conn:
        try:
            checked_reader(conn, prefix, args.tenant, args.schedule)
        except UsageError as exc:  # a tenant may be deployed before its first schedule: watch, and say so
            if exc.code != EXIT_NOT_FOUND:
                raise
            logging.getLogger("scheduler.reconcile.follow").warning("%s: following it anyway", exc)
        if from_ms is not None:
            refuse_dropped(conn, schema_name(prefix), from_ms, int(time.time() * 1000))
    metrics = ReconcileMetrics()
    if args.metrics_port:
        live, ready = metrics.probes(args.window, args.settle)
        serve(args.metrics_bind, args.metrics_port, metrics.registry, live, ready)
    stop = threading.Event()
    reasons: list[int] = []

    def on_signal(signum: int, frame: FrameType | None) -> None:
        reasons.append(EXIT_INTERRUPTED if signum == signal.SIGINT else EXIT_OK)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    options = FollowOptions(args.tenant, args.schedule, args.window, args.settle, args.batch)
    url = _url(args)
    follower = Follower(lambda: psycopg.connect(url, connect_timeout=10), prefix, options, metrics)
    follower.run(first_window(int(time.time() * 1000), args.window, args.settle, from_ms), stop)
    return reasons[0] if reasons else EXIT_OK


def run(args: argparse.Namespace) -> int:
    try:
        prefix = Settings.from_env().topic_prefix
        return _follow(args, prefix) if args.follow else _reconcile_range(args, prefix)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.code
