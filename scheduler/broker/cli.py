"""`scheduler broker start|stop|status`: the local Kafka broker, from the command line.

Only the bootstrap address goes to stdout (so `$(scheduler broker start)` works); messages go to stderr."""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from scheduler.broker.local import BrokerError, LocalBroker, default_data_dir

EXIT_BAD_INPUT = 2
EXIT_NOT_RUNNING = 3


def register(subparsers: argparse._SubParsersAction) -> None:
    broker = subparsers.add_parser("broker", help="run a local single-node Kafka broker")
    actions = broker.add_subparsers(dest="broker_command", required=True)

    start = actions.add_parser("start", help="start the broker in the background and print its bootstrap address")
    start.add_argument("--port", type=int, default=9092, help="client port (default 9092)")
    start.add_argument("--controller-port", type=int, default=None, help="KRaft controller port (default port+1)")
    start.add_argument(
        "--sasl-port", type=int, default=None,
        help="also listen for SASL_PLAINTEXT (SCRAM-SHA-512) on this port and enforce ACLs; the super user "
             "`admin` gets a password in DATA_DIR/admin.password; PLAINTEXT clients stay super users "
             "(docs/control-plane.md). Data formatted without it needs --wipe",
    )
    start.add_argument(
        "--ssl-port", type=int, default=None,
        help="also listen for SASL_SSL (SCRAM-SHA-512 inside TLS) on this port, with a self-signed certificate "
             "made by keytool at the first start; clients trust DATA_DIR/tls/ca.pem (`ssl.ca.location`)",
    )
    start.add_argument("--wipe", action="store_true", help="delete the broker's data before starting")
    start.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for the broker (default 120)")
    _add_data_dir(start)
    start.set_defaults(handler=_start)

    stop = actions.add_parser("stop", help="stop the broker (controlled shutdown)")
    stop.add_argument("--wipe", action="store_true", help="delete the broker's data after stopping")
    stop.add_argument("--timeout", type=float, default=30.0, help="seconds before SIGKILL (default 30)")
    _add_data_dir(stop)
    stop.set_defaults(handler=_stop)

    status = actions.add_parser("status", help="exit 0 if the broker runs, 3 if not")
    _add_data_dir(status)
    status.set_defaults(handler=_status)


def _add_data_dir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--data-dir", type=Path, default=None, help=f"broker state (default {default_data_dir()})"
    )


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _fail(error: BrokerError) -> int:
    _say(f"scheduler broker: error: {error}")
    return EXIT_BAD_INPUT


def _start(args: argparse.Namespace) -> int:
    external = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if external:
        _say(f"KAFKA_BOOTSTRAP_SERVERS is set: using the cluster at {external}; no local broker started")
        print(external)
        return 0
    data_dir = args.data_dir or default_data_dir()
    began = time.monotonic()
    try:
        broker = LocalBroker(data_dir, args.port, args.controller_port, args.sasl_port, args.ssl_port)
        if args.wipe:
            broker.wipe()
        was_running = broker.is_running()
        bootstrap = broker.start(timeout=args.timeout)
    except BrokerError as error:
        return _fail(error)
    if was_running:
        _say(f"broker already running (pid {broker.pid()}), data in {broker.data_dir}")
    else:
        _say(
            f"broker started in {time.monotonic() - began:.1f}s (pid {broker.pid()}), data in {broker.data_dir}, "
            f"log {broker.log_file}; stop it with `scheduler broker stop`"
        )
    if broker.sasl_bootstrap is not None:
        _say(f"SASL_PLAINTEXT (SCRAM-SHA-512, ACLs enforced) on {broker.sasl_bootstrap}: "
             f"user admin, password in {broker.admin_password_file}")
    if broker.ssl_bootstrap is not None:
        _say(f"SASL_SSL (SCRAM-SHA-512 over TLS) on {broker.ssl_bootstrap}: user admin, CA {broker.ca_file}")
    print(bootstrap, flush=True)
    return 0


def _stop(args: argparse.Namespace) -> int:
    broker = LocalBroker.from_data_dir(args.data_dir or default_data_dir())
    try:
        was_running = broker.stop(timeout=args.timeout)
        if args.wipe:
            broker.wipe()
    except BrokerError as error:
        return _fail(error)
    _say("broker stopped" if was_running else f"no broker was running from {broker.data_dir}")
    if args.wipe:
        _say(f"broker data in {broker.data_dir} deleted")
    return 0


def _status(args: argparse.Namespace) -> int:
    broker = LocalBroker.from_data_dir(args.data_dir or default_data_dir())
    external = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if external:
        _say(f"note: KAFKA_BOOTSTRAP_SERVERS is set, so the scheduler uses {external}, not the local broker")
    pid = broker.pid()
    if pid is None:
        print(f"stopped (data dir {broker.data_dir})")
        return EXIT_NOT_RUNNING
    sasl = "" if broker.sasl_bootstrap is None else f" sasl_bootstrap={broker.sasl_bootstrap}"
    print(f"running pid={pid} bootstrap={broker.bootstrap}{sasl} data_dir={broker.data_dir}")
    return 0
