"""`scheduler connect start|stop|status`: the local Kafka Connect worker, from the command line.

Only the REST URL goes to stdout (so `$(scheduler connect start)` works); messages go to stderr.
With KAFKA_CONNECT_URL set, that worker is used and nothing is started."""
from __future__ import annotations

import argparse
import time

from scheduler.cli_support import (
    add_data_dir,
    add_stop_and_status,
    external_instead,
    fail,
    note_external,
    print_status,
    say,
    say_started,
)
from scheduler.config import Settings
from scheduler.connect.local import DEFAULT_PORT, ConnectError, LocalConnect, default_data_dir
from scheduler.timing.cli_values import duration_type

URL_ENV = "KAFKA_CONNECT_URL"


def register(subparsers: argparse._SubParsersAction) -> None:
    connect = subparsers.add_parser("connect", help="run a local Kafka Connect worker (the audit ledger's sinks)")
    actions = connect.add_subparsers(dest="connect_command", required=True)

    start = actions.add_parser("start", help="start the worker in the background and print its REST URL")
    start.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"REST port (default {DEFAULT_PORT})")
    start.add_argument("--timeout", type=duration_type("s", bare_unit="s"), default=180.0, metavar="DURATION",
                       help="how long to wait for the worker: a duration, or seconds (default 180s)")
    add_data_dir(start, "worker state", default_data_dir())
    start.set_defaults(handler=_start)

    add_stop_and_status(actions, "worker", "stop the worker (tasks commit their offsets first)", "worker state",
                        default_data_dir(), (_stop, _status))


def _start(args: argparse.Namespace) -> int:
    if external_instead(URL_ENV, "using the Connect worker at {}; no local worker started"):
        return 0
    settings = Settings.from_env()
    began = time.monotonic()
    try:
        worker = LocalConnect(args.data_dir or default_data_dir(), settings.bootstrap_servers,
                              settings.topic_prefix, args.port)
        was_running = worker.is_running()
        url = worker.start(timeout=args.timeout)
    except ConnectError as error:
        return fail("scheduler connect", error)
    say_started("Connect worker", was_running, began, worker.pid(), worker.data_dir,
                f" against {settings.bootstrap_servers}, log {worker.log_file}; stop it with `scheduler connect stop`")
    print(url, flush=True)
    return 0


def _stop(args: argparse.Namespace) -> int:
    worker = LocalConnect.from_data_dir(args.data_dir or default_data_dir())
    was_running = worker.stop(timeout=args.timeout)
    say("Connect worker stopped" if was_running else f"no Connect worker was running from {worker.data_dir}")
    return 0


def _status(args: argparse.Namespace) -> int:
    note_external(URL_ENV, "the audit ledger uses {}, not the local worker")
    worker = LocalConnect.from_data_dir(args.data_dir or default_data_dir())
    pid = worker.pid()
    running = (f"pid={pid} url={worker.url} bootstrap={worker.bootstrap} prefix={worker.prefix} "
               f"data_dir={worker.data_dir}")
    return print_status(None if pid is None else running, worker.data_dir)
