"""`scheduler occurrences get|list|rerun`: one occurrence and its attempts, a schedule's run history, a re-run."""
from __future__ import annotations

import argparse
import os
import sys

import psycopg

from scheduler.audit.history import LEDGER_ENV, Ledger
from scheduler.control.cli_common import (
    Record,
    add,
    client_for,
    command,
    emit,
    output_arg,
    table_text,
    tenant_arg,
    utc,
)
from scheduler.control.occurrence_history import LEDGER_STATUSES, ledger_row, select, view_row
from scheduler.timing.cli_values import format_duration_ms, instant_type
from scheduler.wire import vocabulary

STATUSES = (*vocabulary.choices("OccurrenceState"), *LEDGER_STATUSES)
# Asked of the ledger when --status filters: the status is computed from each row, after the query's LIMIT.
LEDGER_ROWS_FOR_STATUS = 1000


def occurrences_get(args: argparse.Namespace) -> int:
    with client_for(args) as client:
        status = client.occurrence(args.tenant, args.occurrence_id)
    return emit(args, status, lambda s: (
        f"{s['occurrence_id']}  {s['state']}  schedule {s['schedule_id']} v{s['schedule_version']}  "
        f"scheduled_for {utc(s['scheduled_for_ms'])}  attempt {s['attempt']}\n"
        + "\n".join(f"  {a['kind']} attempt {a['attempt']} at {utc(a['at_ms'])}"
                    f"{'  ' + a['error_message'] if a.get('error_message') else ''}" for a in s["attempts"])))


def occurrences_list(args: argparse.Namespace) -> int:
    """The schedule's recent occurrences, newest first: from the ledger when one is configured and answers
    (else, said on stderr, from the view), each row saying which."""
    rows: list[Record] | None = None
    with client_for(args) as client:
        client.get(args.tenant, args.schedule)  # not found (3) when it is not this tenant's
        if args.database_url:
            rows = _ledger_rows(args)
        if rows is None:
            rows = [{**view_row(s), "source": "views"} for s in client.occurrences_of(args.tenant, args.schedule)]
    rows = select(rows, args.since, args.status, args.limit)
    return emit(args, rows, _rows_text)


def _ledger_rows(args: argparse.Namespace) -> list[Record] | None:
    limit = args.limit if args.status is None else max(args.limit, LEDGER_ROWS_FOR_STATUS)
    try:
        found = Ledger(args.database_url, args.prefix).occurrences(args.tenant, args.schedule, limit, args.since)
    except (psycopg.Error, OSError) as exc:
        print(f"note: the audit ledger did not answer ({type(exc).__name__}: {str(exc).strip()}); "
              "showing what the occurrence-status view holds", file=sys.stderr)
        return None
    return [{**ledger_row(row), "source": "ledger"} for row in found]


def _rows_text(rows: list[Record]) -> str:
    return table_text(("OCCURRENCE", "SCHEDULED FOR", "STATUS", "ATTEMPTS", "LAG", "SOURCE"), [
        (r["occurrence_id"], utc(r["scheduled_for_ms"]), r["status"], r["attempts"],
         "-" if r["lag_ms"] is None else format_duration_ms(r["lag_ms"]), r["source"]) for r in rows],
        "(no occurrences)")


def occurrences_rerun(args: argparse.Namespace) -> int:
    return command(args, lambda c: c.rerun(args.tenant, args.occurrence_id, args.schedule))


def register_occurrences(subparsers: argparse._SubParsersAction) -> None:
    occurrences = subparsers.add_parser("occurrences", help="inspect and re-run occurrences")
    overbs = occurrences.add_subparsers(dest="verb", required=True)
    oget = add(overbs, "get", occurrences_get, "show an occurrence and its attempts")
    tenant_arg(oget)
    oget.add_argument("occurrence_id")
    listing = add(overbs, "list", occurrences_list,
                  "a schedule's recent occurrences (status, attempts, lag), newest first")
    tenant_arg(listing)
    listing.add_argument("--schedule", required=True, help="the schedule id")
    listing.add_argument("--since", type=instant_type,
                         help="only occurrences scheduled at or after this instant (RFC 3339, epoch ms, local in --tz)")
    listing.add_argument("--tz", dest="time_zone", help="IANA zone of a --since given without an offset")
    listing.add_argument("--status", type=str.upper, choices=STATUSES, help="only occurrences with this status")
    listing.add_argument("--limit", type=int, default=50, help="at most this many rows (default 50)")
    listing.add_argument("--database-url", default=os.environ.get(LEDGER_ENV) or None,
                         help=f"the audit ledger to read (default ${LEDGER_ENV}; none: the view)")
    output_arg(listing)
    rerun = add(overbs, "rerun", occurrences_rerun, "dispatch a finished or dead occurrence again")
    tenant_arg(rerun)
    rerun.add_argument("occurrence_id")
    rerun.add_argument("--schedule", help="its schedule id (default: looked up)")
