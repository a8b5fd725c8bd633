"""`scheduler audit retain --keep DURATION [--dry-run]`: drops the occurrence tables' whole daily partitions
older than the kept window, records each dropped range (for `scheduler reconcile`, which then refuses
it), and creates the days ahead as `audit ensure` does; meant to run daily (docs/operations.md).

Also the partition lines `audit ensure` prints, so both verbs describe partitions alike."""
from __future__ import annotations

import argparse
import time

import psycopg

from scheduler.audit import tables
from scheduler.audit.partition_db import PartitionsReport, TableDecision, is_partitioned, retain
from scheduler.audit.partitions import DROP, PARTITIONED, retention_cutoff
from scheduler.audit.postgres import PostgresError, database_url
from scheduler.cli_support import EXIT_BAD_INPUT, EXIT_UNAVAILABLE, say
from scheduler.config import Settings
from scheduler.timing.cli_values import duration_type

LOCK_TIMEOUT = "10s"
MIGRATE = 'docs/operations.md, "Partitioning an older ledger"'


def register_retain(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "retain", help="drop the occurrence tables' daily partitions older than --keep",
        description="Drops whole UTC-day partitions of dispatches and attempts whose upper bound is at or before "
                    "now - KEEP (never DEFAULT, never one overlapping the kept window), records each dropped range "
                    "in <schema>.ledger_retention, and creates the days ahead as `audit ensure` does. Exit status: "
                    "0 done, 2 a bad argument, no database configured or no ledger tables, 6 the database "
                    "unreachable or a partition still locked after 10s (docs/cli.md).")
    parser.add_argument("--keep", type=duration_type(), required=True, metavar="DURATION",
                        help="how much history to keep, back from now: a duration such as 7d or 36h")
    parser.add_argument("--dry-run", action="store_true", help="print what would be dropped; change nothing")
    parser.add_argument("--prefix", help="topic prefix (default: $SCHEDULER_TOPIC_PREFIX or 'sched')")
    parser.set_defaults(handler=run_retain)


def run_retain(args: argparse.Namespace) -> int:
    prefix = args.prefix or Settings.from_env().topic_prefix
    schema = tables.schema_name(prefix)
    now_ms = int(time.time() * 1000)
    try:
        with psycopg.connect(database_url(), connect_timeout=10) as conn:
            # A DROP waiting for its lock would queue the sink's inserts behind it: give up instead.
            conn.execute(f"SET lock_timeout = '{LOCK_TIMEOUT}'")
            found = [table for table in PARTITIONED if _exists(conn, f"{schema}.{table}")]
            if not found:
                say(f"scheduler audit retain: no ledger tables in schema {schema!r} (prefix {prefix!r}): "
                    "run `scheduler audit ensure` first")
                return EXIT_BAD_INPUT
            unpartitioned = [f"{schema}.{table}" for table in found if not is_partitioned(conn, schema, table)]
            decisions, report = retain(conn, schema, now_ms, args.keep, args.dry_run)
    except psycopg.errors.LockNotAvailable as error:
        say(f"scheduler audit retain: a partition stayed in use for {LOCK_TIMEOUT} (those dropped before it "
            f"stay dropped and recorded): {str(error).strip()}; run it again")
        return EXIT_UNAVAILABLE
    except psycopg.OperationalError as error:
        say(f"scheduler audit retain: cannot reach the audit database: {str(error).strip()}")
        return EXIT_UNAVAILABLE
    except (PostgresError, psycopg.Error, ValueError) as error:
        say(f"scheduler audit retain: {error}")
        return EXIT_BAD_INPUT
    print_decisions(schema, decisions, args.dry_run)
    print_partitions(PartitionsReport(report.created, report.ok, unpartitioned))
    dropped = sum(1 for item in decisions if item.decision.action == DROP)
    print(f"partitions: {dropped} {'to drop' if args.dry_run else 'dropped'}, {len(decisions) - dropped} kept "
          f"(cutoff {retention_cutoff(now_ms, args.keep)}, schema {schema!r}{', dry run' if args.dry_run else ''})")
    return 0


def _exists(conn: psycopg.Connection, qualified: str) -> bool:
    row = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (qualified,)).fetchone()
    return bool(row and row[0])


def print_decisions(schema: str, decisions: list[TableDecision], dry_run: bool) -> None:
    """One line per partition: what retain did with it (or would, with --dry-run) and why."""
    for item in decisions:
        decision = item.decision
        verb = ("DROP    " if dry_run else "dropped ") if decision.action == DROP else "kept    "
        bounds = decision.bounds.label() if decision.bounds else "DEFAULT"
        print(f"{verb} partition {schema}.{decision.partition} {bounds}: {decision.reason}")


def print_partitions(report: PartitionsReport) -> None:
    """One line per partitioned table (what was created, what was there), one per table still unpartitioned."""
    for table, created in report.created.items():
        found = report.ok.get(table, [])
        days = sorted(name for name in [*created, *found] if not name.endswith("_default"))
        span = f"days {days[0].rsplit('_', 1)[1]} .. {days[-1].rsplit('_', 1)[1]}" if days else "no days"
        print(f"{'created ' if created else 'ok      '} partitions {table}: {len(created)} created, "
              f"{len(found)} ok ({span}, and DEFAULT)")
    for table in report.unpartitioned:
        print(f"UNPARTITIONED table {table}: an older ledger's plain table, left as it is and still filled (its sink "
              f"upserts on the Kafka coordinates); retain cannot drop from it; to partition it see {MIGRATE}")
