"""`scheduler worker`: run a handler, given as `module:function`, over a tenant's occurrences."""
from __future__ import annotations

import argparse
import importlib
import logging
import signal
from types import FrameType

from scheduler.codec import codec_from_settings
from scheduler.config import Settings
from scheduler.worker.attempt import Handler
from scheduler.worker.worker import DEFAULT_PRIORITIES, Worker, WorkerOptions


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("worker", help="run a worker: a handler per occurrence of a tenant")
    parser.add_argument("--tenant", required=True)
    parser.add_argument("--handler", required=True, metavar="MODULE:FUNCTION", dest="handler_path",
                        help="import path of handler(occurrence, ctx)")
    parser.add_argument("--group-id", help="consumer (or share) group (default: <prefix>.workers.<tenant>, "
                                           "<prefix>.share-workers.<tenant> with --share)")
    parser.add_argument("--share", action="store_true", help="receive work through a Kafka share group (preview)")
    parser.add_argument("--priority", action="append", choices=DEFAULT_PRIORITIES, dest="priorities",
                        help="priority topics to read (repeatable; default: all)")
    parser.add_argument("--worker-id", help="stable id of this worker (default: host-pid); names its transactional id")
    parser.add_argument("--session-timeout-ms", type=int, default=WorkerOptions.session_timeout_ms,
                        help="how soon the group gives a silent worker's partitions to others")
    parser.add_argument("--max-poll-interval-ms", type=int, default=WorkerOptions.max_poll_interval_ms,
                        help="longest a handler may run before the group considers the worker gone")
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
    return target  # type: ignore[return-value]


def _run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings = Settings.from_env()
    worker = Worker(
        settings.bootstrap_servers, settings.topic_prefix, args.tenant, load_handler(args.handler_path),
        group_id=args.group_id, priorities=tuple(args.priorities or DEFAULT_PRIORITIES),
        worker_id=args.worker_id, share=args.share,
        options=WorkerOptions(session_timeout_ms=args.session_timeout_ms,
                              max_poll_interval_ms=args.max_poll_interval_ms),
        codec=codec_from_settings(settings),
    )

    def on_signal(signum: int, frame: FrameType | None) -> None:
        worker.stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    worker.run()
    return 0
