"""`scheduler worker`: run a handler, given as `module:function`, over a tenant's occurrences."""
from __future__ import annotations

import argparse
import importlib
import logging
import os
import signal
import sys
from pathlib import Path
from types import FrameType

from scheduler.cli_support import EXIT_BAD_INPUT, EXIT_FORBIDDEN, add_renamed
from scheduler.config import TENANT_ENV, Settings
from scheduler.control.acls import scram_client_config
from scheduler.health.endpoint import DEFAULT_BIND, serve
from scheduler.kafka.client_config import CLIENT_CONFIG_ENV, client_config_path, read_client_config
from scheduler.kafka.clients import NotAuthorized, connection
from scheduler.timing.cli_values import duration_type
from scheduler.wire.registry_codec import codec_from_settings
from scheduler.worker.attempt import Handler
from scheduler.worker.worker import DEFAULT_PRIORITIES, Worker, WorkerOptions

# Refused access exits 5 (forbidden, docs/cli.md), reported in one line without a traceback.
EXIT_USAGE = EXIT_BAD_INPUT
SASL_CREDENTIALS = frozenset({"sasl.mechanism", "sasl.username", "sasl.password"})


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("worker", help="run a worker: a handler per occurrence of a tenant")
    parser.add_argument("--tenant", default=os.environ.get(TENANT_ENV) or None, required=not os.environ.get(TENANT_ENV),
                        help=f"the tenant whose occurrences it runs (default ${TENANT_ENV})")
    parser.add_argument("--handler", required=True, metavar="MODULE:FUNCTION", dest="handler_path",
                        help="import path of handler(occurrence, ctx)")
    parser.add_argument("--group-id", help="consumer (or share) group (default: <prefix>.workers.<tenant>, "
                                           "<prefix>.share-workers.<tenant> with --share)")
    parser.add_argument("--share", action="store_true", help="receive work through a Kafka share group (preview)")
    parser.add_argument("--priority", action="append", choices=DEFAULT_PRIORITIES, dest="priorities",
                        help="priority topics to read (repeatable; default: all)")
    parser.add_argument("--worker-id", help="stable id of this worker (default: host-pid); names its transactional id")
    add_renamed(parser, "--session-timeout", "--session-timeout-ms", "session_timeout_ms", duration_type(), int,
                f"how soon the group gives a silent worker's partitions to others "
                f"(default {WorkerOptions.session_timeout_ms}ms)", "45s", default=WorkerOptions.session_timeout_ms)
    add_renamed(parser, "--max-poll-interval", "--max-poll-interval-ms", "max_poll_interval_ms", duration_type(), int,
                f"longest a handler may run before the group considers the worker gone "
                f"(default {WorkerOptions.max_poll_interval_ms}ms)", "5m", default=WorkerOptions.max_poll_interval_ms)
    parser.add_argument("--sasl-user", metavar="USER",
                        help="authenticate as this SCRAM-SHA-512 user (see tenants grant-worker), over "
                             "SASL_PLAINTEXT unless --client-config sets security.protocol=SASL_SSL")
    parser.add_argument("--sasl-password-env", metavar="VAR",
                        help="environment variable holding the --sasl-user's password")
    parser.add_argument("--client-config", type=Path, metavar="FILE",
                        help="librdkafka settings for every Kafka client of the worker, key=value lines "
                             f"(default ${CLIENT_CONFIG_ENV})")
    parser.add_argument("--metrics-port", type=int, default=0,
                        help="serve Prometheus metrics at /metrics, and the probes /healthz and /readyz, on this "
                             "port (0: disabled)")
    parser.add_argument("--metrics-bind", default=DEFAULT_BIND, metavar="ADDRESS",
                        help=f"address the metrics port listens on (default {DEFAULT_BIND})")
    parser.add_argument("--log-level", default="INFO")
    parser.set_defaults(handler=_run)


def load_handler(path: str) -> Handler:
    """`package.module:function` -> the function."""
    module_name, sep, attribute = path.partition(":")
    if not sep or not module_name or not attribute:
        raise ValueError(f"handler must look like module:function, got {path!r}")
    target: object = importlib.import_module(module_name)
    for part in attribute.split("."):
        target = getattr(target, part)
    if not callable(target):
        raise TypeError(f"{path} is not callable")
    return target


def client_config(args: argparse.Namespace, bootstrap: str) -> dict[str, str]:
    """The settings of --client-config and --sasl-user; the password comes from the environment, so it
    shows neither in `ps` nor in shell history."""
    path = client_config_path(args.client_config)
    settings = read_client_config(path) if path is not None else {}
    if (args.sasl_user is None) != (args.sasl_password_env is None):
        raise ValueError("--sasl-user and --sasl-password-env go together")
    if args.sasl_user is None:
        return settings
    password = os.environ.get(args.sasl_password_env, "")
    if not password:
        raise ValueError(f"${args.sasl_password_env} is empty or not set: put the password of {args.sasl_user} there")
    # The file may choose SASL_SSL (and name the bootstrap, which Worker checks); the credentials are the options'.
    clash = sorted(settings.keys() & SASL_CREDENTIALS)
    if clash:
        raise ValueError(f"{args.client_config} sets {clash}, which --sasl-user sets")
    conf = {**scram_client_config(bootstrap, args.sasl_user, password), **settings}
    if conf["security.protocol"].upper() not in ("SASL_PLAINTEXT", "SASL_SSL"):
        raise ValueError(f"--sasl-user needs security.protocol SASL_PLAINTEXT or SASL_SSL, "
                         f"not {conf['security.protocol']}")
    return conf


def _run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings = Settings.from_env()
    try:
        conf = connection(settings.bootstrap_servers, client_config(args, settings.bootstrap_servers))
    except (ValueError, OSError) as exc:  # bad client settings, an unreadable --client-config
        print(f"scheduler worker: {exc}", file=sys.stderr)
        return EXIT_USAGE
    worker = Worker(
        settings.bootstrap_servers, settings.topic_prefix, args.tenant, load_handler(args.handler_path),
        group_id=args.group_id, priorities=tuple(args.priorities or DEFAULT_PRIORITIES),
        worker_id=args.worker_id, share=args.share,
        options=WorkerOptions(session_timeout_ms=args.session_timeout_ms,
                              max_poll_interval_ms=args.max_poll_interval_ms),
        codec=codec_from_settings(settings),
        client_config=conf,
    )

    def on_signal(signum: int, frame: FrameType | None) -> None:
        worker.stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    if args.metrics_port:
        live, ready = worker.metrics.probes(args.max_poll_interval_ms / 1000)
        serve(args.metrics_bind, args.metrics_port, worker.metrics.registry, live, ready)
    try:
        worker.run()
    except NotAuthorized as exc:
        print(f"scheduler worker: {exc}", file=sys.stderr)
        return EXIT_FORBIDDEN
    return 0
