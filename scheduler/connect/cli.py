"""`scheduler connect start|stop|status`: the local Kafka Connect worker, from the command line.

Only the REST URL goes to stdout (so `$(scheduler connect start)` works); messages go to stderr.
With KAFKA_CONNECT_URL set, that worker is used and nothing is started."""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from scheduler.broker.local import BrokerError
from scheduler.config import Settings
from scheduler.connect.local import DEFAULT_PORT, ConnectError, LocalConnect, default_data_dir

EXIT_BAD_INPUT = 2
EXIT_NOT_RUNNING = 3
URL_ENV = "KAFKA_CONNECT_URL"


def register(subparsers: argparse._SubParsersAction) -> None:
    connect = subparsers.add_parser("connect", help="run a local Kafka Connect worker (the audit ledger's sinks)")
    actions = connect.add_subparsers(dest="connect_command", required=True)

    start = actions.add_parser("start", help="start the worker in the background and print its REST URL")
    start.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"REST port (default {DEFAULT_PORT})")
    start.add_argument("--timeout", type=float, default=180.0, help="seconds to wait for the worker (default 180)")
    _add_data_dir(start)
    start.set_defaults(handler=_start)

    stop = actions.add_parser("stop", help="stop the worker (tasks commit their offsets first)")
    stop.add_argument("--timeout", type=float, default=30.0, help="seconds before SIGKILL (default 30)")
    _add_data_dir(stop)
    stop.set_defaults(handler=_stop)

    status = actions.add_parser("status", help="exit 0 if the worker runs, 3 if not")
    _add_data_dir(status)
    status.set_defaults(handler=_status)


def _add_data_dir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data-dir", type=Path, default=None, help=f"worker state (default {default_data_dir()})")


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _start(args: argparse.Namespace) -> int:
    external = os.environ.get(URL_ENV)
    if external:
        _say(f"{URL_ENV} is set: using the Connect worker at {external}; no local worker started")
        print(external)
        return 0
    settings = Settings.from_env()
    began = time.monotonic()
    try:
        worker = LocalConnect(args.data_dir or default_data_dir(), settings.bootstrap_servers,
                              settings.topic_prefix, args.port)
        was_running = worker.is_running()
        url = worker.start(timeout=args.timeout)
    except (ConnectError, BrokerError) as error:
        _say(f"scheduler connect: error: {error}")
        return EXIT_BAD_INPUT
    if was_running:
        _say(f"Connect worker already running (pid {worker.pid()}), data in {worker.data_dir}")
    else:
        _say(f"Connect worker started in {time.monotonic() - began:.1f}s (pid {worker.pid()}) against "
             f"{settings.bootstrap_servers}, log {worker.log_file}; stop it with `scheduler connect stop`")
    print(url, flush=True)
    return 0


def _stop(args: argparse.Namespace) -> int:
    worker = LocalConnect.from_data_dir(args.data_dir or default_data_dir())
    was_running = worker.stop(timeout=args.timeout)
    _say("Connect worker stopped" if was_running else f"no Connect worker was running from {worker.data_dir}")
    return 0


def _status(args: argparse.Namespace) -> int:
    external = os.environ.get(URL_ENV)
    if external:
        _say(f"note: {URL_ENV} is set, so the audit ledger uses {external}, not the local worker")
    worker = LocalConnect.from_data_dir(args.data_dir or default_data_dir())
    pid = worker.pid()
    if pid is None:
        print(f"stopped (data dir {worker.data_dir})")
        return EXIT_NOT_RUNNING
    print(f"running pid={pid} url={worker.url} bootstrap={worker.bootstrap} prefix={worker.prefix} "
          f"data_dir={worker.data_dir}")
    return 0
