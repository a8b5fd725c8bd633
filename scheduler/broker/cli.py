"""`scheduler broker start|stop|status`: the local Kafka broker, from the command line.

Only the bootstrap address goes to stdout (so `$(scheduler broker start)` works); messages go to stderr."""
from __future__ import annotations

import argparse
import time

from scheduler.broker.local import BrokerError, LocalBroker, default_data_dir
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
from scheduler.timing.cli_values import duration_type

BOOTSTRAP_ENV = "KAFKA_BOOTSTRAP_SERVERS"


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
    start.add_argument("--timeout", type=duration_type("s", bare_unit="s"), default=120.0, metavar="DURATION",
                       help="how long to wait for the broker: a duration, or seconds (default 120s)")
    add_data_dir(start, "broker state", default_data_dir())
    start.set_defaults(handler=_start)

    stop = add_stop_and_status(actions, "broker", "stop the broker (controlled shutdown)", "broker state",
                               default_data_dir(), (_stop, _status))
    stop.add_argument("--wipe", action="store_true", help="delete the broker's data after stopping")


def _start(args: argparse.Namespace) -> int:
    if external_instead(BOOTSTRAP_ENV, "using the cluster at {}; no local broker started"):
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
        return fail("scheduler broker", error)
    say_started("broker", was_running, began, broker.pid(), broker.data_dir,
                f", data in {broker.data_dir}, log {broker.log_file}; stop it with `scheduler broker stop`")
    if broker.sasl_bootstrap is not None:
        say(f"SASL_PLAINTEXT (SCRAM-SHA-512, ACLs enforced) on {broker.sasl_bootstrap}: "
            f"user admin, password in {broker.admin_password_file}")
    if broker.ssl_bootstrap is not None:
        say(f"SASL_SSL (SCRAM-SHA-512 over TLS) on {broker.ssl_bootstrap}: user admin, CA {broker.ca_file}")
    print(bootstrap, flush=True)
    return 0


def _stop(args: argparse.Namespace) -> int:
    broker = LocalBroker.from_data_dir(args.data_dir or default_data_dir())
    try:
        was_running = broker.stop(timeout=args.timeout)
        if args.wipe:
            broker.wipe()
    except BrokerError as error:
        return fail("scheduler broker", error)
    say("broker stopped" if was_running else f"no broker was running from {broker.data_dir}")
    if args.wipe:
        say(f"broker data in {broker.data_dir} deleted")
    return 0


def _status(args: argparse.Namespace) -> int:
    broker = LocalBroker.from_data_dir(args.data_dir or default_data_dir())
    note_external(BOOTSTRAP_ENV, "the scheduler uses {}, not the local broker")
    pid = broker.pid()
    sasl = "" if broker.sasl_bootstrap is None else f" sasl_bootstrap={broker.sasl_bootstrap}"
    running = f"pid={pid} bootstrap={broker.bootstrap}{sasl} data_dir={broker.data_dir}"
    return print_status(None if pid is None else running, broker.data_dir)
