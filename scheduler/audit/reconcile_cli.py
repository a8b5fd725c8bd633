"""`scheduler reconcile --tenant T --from A --to B [--schedule S] [--json]`: proves from the audit ledger
that every occurrence the schedule versions called for in [A, B) was accounted for (docs/reconcile.md).

Exit status (docs/cli.md): 0 nothing ABSENT or UNEXPECTED; 1 some (their ids are listed); nothing could be
reconciled: 2 a bad argument (an instant without offset or --tz, from >= to), no database configured or one
without the ledger tables; 3 a tenant or schedule the ledger does not know; 6 an unreachable database.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import psycopg
from dateutil import parser as dateparser

from scheduler.audit.report_format import document, summary
from scheduler.cli_support import EXIT_BAD_INPUT, EXIT_FINDING, EXIT_NOT_FOUND, EXIT_OK, EXIT_UNAVAILABLE
from scheduler.config import TENANT_ENV, Settings
from scheduler.timing.cli_values import parse_instant_ms
from scheduler.timing.instants import to_ms

DATABASE_ENV = "AUDIT_DATABASE_URL"
EXIT_FOUND, EXIT_UNUSABLE = EXIT_FINDING, EXIT_BAD_INPUT


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
    parser.add_argument("--from", dest="from_", required=True, metavar="INSTANT",
                        help="RFC 3339 instant, epoch ms, or a local date-time in --tz (inclusive, on scheduled_for)")
    parser.add_argument("--to", required=True, metavar="INSTANT", help="the same forms (exclusive)")
    parser.add_argument("--tz", help="IANA zone of --from/--to given without an offset")
    parser.add_argument("--schedule", help="only this schedule id")
    parser.add_argument("--json", action="store_true", help="one JSON document (docs/reconcile.md) on stdout")
    parser.add_argument("--all", action="store_true", help="with --json: list every expected occurrence too")
    parser.add_argument("--database-url", help=f"libpq URL or DSN of the ledger (default: ${DATABASE_ENV})")
    parser.set_defaults(handler=run)


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


def _read(args: argparse.Namespace, prefix: str, from_ms: int, to_ms: int):
    from scheduler.audit.ledger_reader import LedgerError, LedgerReader

    url = args.database_url or os.environ.get(DATABASE_ENV)
    if not url:
        raise UsageError(f"no audit database: set {DATABASE_ENV} or pass --database-url")
    try:
        with psycopg.connect(url, connect_timeout=10) as conn:
            reader = LedgerReader(conn, prefix)
            if reader.missing_tables():
                raise LedgerError(f"the database has no ledger tables in schema {reader.schema!r} "
                                  f"(prefix {prefix!r}): {', '.join(reader.missing_tables())}")
            known = reader.schedules(args.tenant)
            if not known:
                raise UsageError(f"tenant {args.tenant!r} has no schedule in the ledger (schema {reader.schema!r})",
                                 EXIT_NOT_FOUND)
            if args.schedule is not None and args.schedule not in known:
                raise UsageError(f"schedule {args.schedule!r} of tenant {args.tenant!r} is not in the ledger",
                                 EXIT_NOT_FOUND)
            return reader.schema, reader.read(args.tenant, from_ms, to_ms, args.schedule)
    except LedgerError as exc:
        raise UsageError(str(exc)) from exc
    except psycopg.OperationalError as exc:
        raise UsageError(f"cannot reach the audit database: {str(exc).strip()}", EXIT_UNAVAILABLE) from exc


def run(args: argparse.Namespace) -> int:
    from scheduler.audit.reconcile import reconcile

    try:
        from_ms, to_ms = instant_ms("--from", args.from_, args.tz), instant_ms("--to", args.to, args.tz)
        if from_ms >= to_ms:
            raise UsageError(f"--from must be before --to ({args.from_} >= {args.to})")
        schema, ledger = _read(args, Settings.from_env().topic_prefix, from_ms, to_ms)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.code
    report = reconcile(ledger, from_ms, to_ms)
    doc = document(report, tenant=args.tenant, schedule=args.schedule, from_ms=from_ms, to_ms=to_ms, schema=schema,
                   every_occurrence=args.all)
    if args.json:
        json.dump(doc, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        print("\n".join(summary(doc, report)))
    return EXIT_OK if report.ok else EXIT_FOUND
