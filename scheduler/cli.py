"""The `scheduler` command: each feature module registers its own subcommands."""
from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from scheduler.cli_support import EXIT_INTERRUPTED

# Each module exposes `register(subparsers)`; its subparsers set `handler`,
# a function taking the parsed namespace and returning an exit code.
COMMAND_MODULES = (
    "scheduler.broker.cli",
    "scheduler.control.topology_cli",
    "scheduler.control.preview_cli",
    "scheduler.engine.cli",
    "scheduler.dev.demo",
    "scheduler.worker.cli",
    "scheduler.control.cli",
    "scheduler.audit.reconcile_cli",
    "scheduler.connect.cli",
    "scheduler.audit.cli",
    "scheduler.doctor.cli",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="scheduler", description=__doc__)
    subparsers = parser.add_subparsers(dest="command", required=True)
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.handler(args) or 0)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        sys.stderr.close()
        return 0
