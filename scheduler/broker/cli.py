"""`scheduler broker start|stop|status|kill|restart`: the local Kafka broker, or a local cluster of
N nodes (`start --nodes N`, scheduler.broker.cluster), from the command line.

Only the bootstrap address goes to stdout (so `$(scheduler broker start)` works); messages go to stderr."""
from __future__ import annotations

import argparse
import time
from pathlib import Path

from scheduler.broker.cluster import LocalCluster, default_ports
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
    broker = subparsers.add_parser("broker", help="run a local Kafka broker (one node, or a cluster with --nodes N)")
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
    start.add_argument(
        "--nodes", type=int, default=1,
        help="start a local cluster of N KRaft nodes (each a controller and a broker, -Xmx384m): node K listens on "
             "PORT+2(K-1), its controller on the port after, its data in DATA_DIR/node-K; internal topics at "
             "replication min(3, N), min.insync.replicas 2 (default 1: the single dev broker)",
    )
    start.add_argument("--wipe", action="store_true", help="delete the broker's data before starting")
    start.add_argument("--timeout", type=duration_type("s", bare_unit="s"), default=120.0, metavar="DURATION",
                       help="how long to wait for the broker: a duration, or seconds (default 120s)")
    add_data_dir(start, "broker state", default_data_dir())
    start.set_defaults(handler=_start)

    stop = add_stop_and_status(actions, "broker", "stop the broker (controlled shutdown)", "broker state",
                               default_data_dir(), (_stop, _status))
    stop.add_argument("--wipe", action="store_true", help="delete the broker's data after stopping")

    for name, handler, says in (("kill", _kill_node, "kill -9 one node of the local cluster, as in a crash"),
                                ("restart", _restart_node, "start one node of the local cluster again")):
        action = actions.add_parser(name, help=says)
        action.add_argument("--node", type=int, required=True, help="the node's number (1..N, its node.id)")
        action.add_argument("--timeout", type=duration_type("s", bare_unit="s"), default=120.0, metavar="DURATION",
                            help="how long to wait for the node: a duration, or seconds (default 120s)")
        add_data_dir(action, "the cluster's state", default_data_dir())
        action.set_defaults(handler=handler)


def _start(args: argparse.Namespace) -> int:
    if external_instead(BOOTSTRAP_ENV, "using the cluster at {}; no local broker started"):
        return 0
    data_dir = args.data_dir or default_data_dir()
    if args.nodes != 1:
        return _start_cluster(args, data_dir)
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


def _start_cluster(args: argparse.Namespace, data_dir: Path) -> int:
    if args.sasl_port is not None or args.ssl_port is not None:
        return fail("scheduler broker", BrokerError("--sasl-port and --ssl-port are for the single node: "
                                                    "a cluster (--nodes) listens for PLAINTEXT only"))
    if args.controller_port is not None:
        return fail("scheduler broker", BrokerError("a cluster's controller ports follow from --port: node K's is "
                                                    "PORT+2(K-1)+1; omit --controller-port"))
    began = time.monotonic()
    try:
        cluster = LocalCluster(data_dir, default_ports(args.port, args.nodes))
        if LocalBroker.from_data_dir(cluster.data_dir).is_running():
            raise BrokerError(f"a single-node broker runs from {cluster.data_dir}: stop it first with "
                              f"`scheduler broker stop`, or start the cluster with another --data-dir")
        if args.wipe:
            cluster.wipe()
        was_running = all(node.is_running() for node in cluster.nodes)
        bootstrap = cluster.start(timeout=args.timeout)
    except BrokerError as error:
        return fail("scheduler broker", error)
    if was_running:
        say(f"cluster of {len(cluster.nodes)} nodes already running, data in {cluster.data_dir}")
    else:
        say(f"cluster of {len(cluster.nodes)} nodes started in {time.monotonic() - began:.1f}s, data in "
            f"{cluster.data_dir}; kill one with `scheduler broker kill --node K`, "
            "stop all with `scheduler broker stop`")
    print(bootstrap, flush=True)
    return 0


def _cluster(args: argparse.Namespace) -> LocalCluster:
    cluster = LocalCluster.from_data_dir(args.data_dir or default_data_dir())
    if cluster is None:
        raise BrokerError(f"no cluster was started from {args.data_dir or default_data_dir()}: "
                          f"start one with `scheduler broker start --nodes 3`")
    return cluster


def _kill_node(args: argparse.Namespace) -> int:
    try:
        node = _cluster(args).node(args.node)
        was_running = node.kill()
    except BrokerError as error:
        return fail("scheduler broker", error)
    say(f"node {args.node} killed (SIGKILL)" if was_running else f"node {args.node} was not running")
    return 0


def _restart_node(args: argparse.Namespace) -> int:
    try:
        cluster = _cluster(args)
        node = cluster.node(args.node)
        node.stop()
        node.start(timeout=args.timeout)
        cluster.wait_for_brokers(len(cluster.nodes), timeout=args.timeout)
    except BrokerError as error:
        return fail("scheduler broker", error)
    say(f"node {args.node} running (pid {node.pid()}) on {node.bootstrap}")
    print(cluster.bootstrap, flush=True)
    return 0


def _stop(args: argparse.Namespace) -> int:
    data_dir = args.data_dir or default_data_dir()
    cluster = LocalCluster.from_data_dir(data_dir)
    broker = LocalBroker.from_data_dir(data_dir)
    try:
        was_running = broker.stop(timeout=args.timeout)
        if cluster is not None:
            cluster_ran = cluster.stop(timeout=args.timeout)
            say(f"cluster of {len(cluster.nodes)} nodes stopped" if cluster_ran
                else f"no cluster node was running from {cluster.data_dir}")
            if args.wipe:
                cluster.wipe()
                say(f"cluster data in {cluster.data_dir} deleted")
            if not was_running:
                if args.wipe:
                    broker.wipe()
                return 0
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
    cluster = LocalCluster.from_data_dir(broker.data_dir)
    if cluster is not None and not broker.is_running():
        return _cluster_status(cluster)
    pid = broker.pid()
    sasl = "" if broker.sasl_bootstrap is None else f" sasl_bootstrap={broker.sasl_bootstrap}"
    running = f"pid={pid} bootstrap={broker.bootstrap}{sasl} data_dir={broker.data_dir}"
    return print_status(None if pid is None else running, broker.data_dir)


def _cluster_status(cluster: LocalCluster) -> int:
    """`running cluster nodes=N up=K bootstrap=...` and one line per node; exit 0 while any node runs, 3 if none."""
    up = sum(node.is_running() for node in cluster.nodes)
    if up == 0:
        return print_status(None, cluster.data_dir)
    print(f"running cluster nodes={len(cluster.nodes)} up={up} bootstrap={cluster.bootstrap} "
          f"data_dir={cluster.data_dir}")
    for line in cluster.describe():
        print(f"  {line}")
    return 0
