"""`scheduler audit ensure` (the ledger's tables and sink connectors) and `scheduler audit postgres
start|stop|status` (a local PostgreSQL for it).

The database is AUDIT_DATABASE_URL, else the local one; the Connect worker is KAFKA_CONNECT_URL,
else the local one (`scheduler connect start`)."""
from __future__ import annotations

import argparse
import os
from collections.abc import Callable

import psycopg
from confluent_kafka import KafkaException

from scheduler.audit import tables
from scheduler.audit.connectors import (
    ConnectorError,
    Database,
    dead_letter_topic,
    ensure_connectors,
    render,
    wait_running,
)
from scheduler.audit.postgres import LocalPostgres, PostgresError, database_url, default_data_dir
from scheduler.audit.retain_cli import print_partitions, register_retain
from scheduler.cli_support import (
    EXIT_BAD_INPUT,
    EXIT_UNAVAILABLE,
    add_data_dir,
    external_instead,
    fail,
    kafka_exit_code,
    print_ensure_rows,
    print_status,
    say,
)
from scheduler.config import Settings
from scheduler.connect.cli import URL_ENV
from scheduler.connect.local import LocalConnect
from scheduler.connect.local import default_data_dir as default_connect_dir
from scheduler.connect.rest import ConnectRest, ConnectRestError
from scheduler.kafka.admin import TopicEnsureError, ensure_rendered_topics
from scheduler.kafka.client_config import add_client_config, client_config_of
from scheduler.kafka.clients import connection
from scheduler.kafka.replication import REPLICATION_ENV
from scheduler.timing.cli_values import duration_type
from scheduler.wire.topology import RenderedTopic, Topology

EXIT_DIFFERS = 1
EXIT_ERROR = EXIT_BAD_INPUT
_PAYLOAD_KEEPS = {"full": "each payload as sent", "hash": "the sha256 of each payload", "none": "no payload"}


def register(subparsers: argparse._SubParsersAction) -> None:
    audit = subparsers.add_parser("audit", help="the audit ledger: Kafka Connect sinks into PostgreSQL")
    commands = audit.add_subparsers(dest="audit_command", required=True)

    ensure = commands.add_parser(
        "ensure", help="create the ledger's tables and create/update its sink connectors",
        description="Exit status: 0 everything matches (connectors that drifted were updated), 1 a table "
                    "differs from the contract (never altered) or, with --check, a connector is missing or "
                    "drifted, 2 a setup it cannot run with (no database configured, a bad argument), 5 Kafka "
                    "refused, 6 the database, the Connect worker or Kafka unreachable (docs/cli.md).")
    ensure.add_argument("--prefix", help="topic prefix (default: $SCHEDULER_TOPIC_PREFIX or 'sched')")
    ensure.add_argument("--check", action="store_true", help="only report connectors that are missing or drifted")
    ensure.add_argument("--replication-factor", type=int, default=None,
                        help=f"of the reject topic (<prefix>.audit-rejects), created here before its connectors "
                             f"(default: ${REPLICATION_ENV}, else min(3, brokers in the cluster))")
    ensure.add_argument("--wait", type=duration_type("s", bare_unit="s"), default=60.0, metavar="DURATION",
                        help="how long to wait for every connector task to run: a duration, or seconds "
                             "(default 60s; 0: do not wait)")
    ensure.add_argument("--payload", choices=tables.PAYLOAD_MODES, default=None,
                        help="what dispatches.payload keeps: full (as sent), hash (its sha256) or none (NULL); "
                             "a new ledger gets hash, an existing one keeps its mode unless this is given")
    add_client_config(ensure)
    ensure.set_defaults(handler=run_ensure)
    register_retain(commands)

    postgres = commands.add_parser("postgres", help="a local PostgreSQL for the ledger (Debian's binaries)")
    actions = postgres.add_subparsers(dest="postgres_command", required=True)
    start = actions.add_parser("start", help="start it in the background and print its URL")
    start.add_argument("--port", type=int, default=None, help="TCP port on 127.0.0.1 (default: a free one)")
    stop = actions.add_parser("stop", help="stop it")
    status = actions.add_parser("status", help="exit 0 if it runs, 3 if not")
    for parser, handler in ((start, _pg_start), (stop, _pg_stop), (status, _pg_status)):
        add_data_dir(parser, "its cluster", default_data_dir())
        parser.set_defaults(handler=handler)


def connect_url() -> str:
    url = os.environ.get(URL_ENV)
    if url:
        return url
    worker = LocalConnect.from_data_dir(default_connect_dir())
    if not worker.is_running():
        raise ConnectorError(f"{URL_ENV} is not set and no local Connect worker runs: "
                             "start one with `scheduler connect start`")
    return worker.url


def run_ensure(args: argparse.Namespace) -> int:
    settings = Settings.from_env()
    prefix = args.prefix or settings.topic_prefix
    try:
        url, rest = database_url(), ConnectRest(connect_url())
        with psycopg.connect(url) as conn:
            report = tables.ensure_tables(conn, prefix, payload=args.payload)
        # Created here, not by Connect, which would leave min.insync.replicas at the broker's default.
        rejects = ensure_rendered_topics(connection(settings.bootstrap_servers, client_config_of(args)),
                                         [RenderedTopic("audit-rejects", dead_letter_topic(prefix), 1, {})],
                                         args.replication_factor)
        unpartitioned = frozenset(name.rsplit(".", 1)[1] for name in report.partitions.unpartitioned)
        configs = render(prefix, Database.from_url(url), Topology.load(), rejects.replication_factor, unpartitioned)
        connectors = ensure_connectors(rest, configs, check_only=args.check)
        if args.wait > 0 and not args.check:
            wait_running(rest, list(configs), args.wait)
    except (PostgresError, ConnectorError, ConnectRestError, psycopg.Error, ValueError, OSError, TopicEnsureError,
            KafkaException) as error:
        say(f"scheduler audit ensure: {error}")
        return _ensure_exit_code(error)
    print_ensure_rows(report.created, report.ok, report.differences, "table ")
    print_partitions(report.partitions)
    print(f"{report.payload_action:<8} payload {report.payload} "
          f"(dispatches.payload keeps {_PAYLOAD_KEEPS[report.payload]})")
    print_ensure_rows(rejects.created, rejects.ok, rejects.differences, "topic ")
    for name in connectors.created:
        print(f"{'MISSING ' if args.check else 'created '} connector {name}")
    for name in connectors.ok:
        print(f"ok       connector {name}")
    for name, keys in connectors.drifted.items():
        print(f"{'DRIFTED ' if args.check else 'updated '} connector {name} ({', '.join(keys)})")
    print(f"tables: {len(report.created)} created, {len(report.ok)} ok, {len(report.differences)} differing; "
          f"connectors: {len(connectors.created)} {'missing' if args.check else 'created'}, {len(connectors.ok)} ok, "
          f"{len(connectors.drifted)} {'drifted' if args.check else 'updated'} "
          f"(prefix {prefix!r}, schema {tables.schema_name(prefix)!r}, connect {rest.url})")
    if report.differences or rejects.differences:
        say("Tables or topics that differ were left unchanged; fix them by hand (docs/audit.md).")
        return EXIT_DIFFERS
    if args.check and (connectors.created or connectors.drifted):
        return EXIT_DIFFERS
    return 0


def _ensure_exit_code(error: Exception) -> int:
    """6 when the database, the Connect worker or Kafka did not answer; 5 when Kafka refused; else 2."""
    if isinstance(error, psycopg.OperationalError) or (isinstance(error, ConnectRestError) and not error.status):
        return EXIT_UNAVAILABLE
    if isinstance(error, KafkaException):
        return kafka_exit_code(error, EXIT_ERROR)
    return EXIT_ERROR


def _pg_start(args: argparse.Namespace) -> int:
    if external_instead(tables.DATABASE_URL_ENV, "the ledger uses that database; no local PostgreSQL started"):
        return 0
    try:
        server = LocalPostgres(args.data_dir or default_data_dir(), args.port)
        url = server.start()
    except (PostgresError, OSError) as error:
        return fail("scheduler audit postgres", error)
    say(f"PostgreSQL runs from {server.data_dir}, log {server.log_file}; stop it with `scheduler audit postgres stop`")
    print(url, flush=True)
    return 0


def _pg_stop(args: argparse.Namespace) -> int:
    return _with_server(args, _stop_server)


def _pg_status(args: argparse.Namespace) -> int:
    return _with_server(args, _print_status)


def _with_server(args: argparse.Namespace, action: Callable[[LocalPostgres], int]) -> int:
    try:
        server = LocalPostgres(args.data_dir or default_data_dir())
    except PostgresError as error:
        return fail("scheduler audit postgres", error)
    return action(server)


def _stop_server(server: LocalPostgres) -> int:
    was_running = server.is_running()
    server.stop()
    say("PostgreSQL stopped" if was_running else f"no PostgreSQL was running from {server.data_dir}")
    return 0


def _print_status(server: LocalPostgres) -> int:
    running = f"url={server.url} data_dir={server.data_dir}" if server.is_running() else None
    return print_status(running, server.data_dir)
