"""Conventions the `scheduler` subcommands share, so scripts can rely on them everywhere: stdout
carries only what a script reads (an address, a status line, a report), messages go to stderr; one
table of exit codes (docs/cli.md); the local services' start/stop/status commands agree on their
flags and exit codes; the `ensure` commands print one aligned row per object; renamed flags keep
their old names as deprecated aliases."""
from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaError, KafkaException

from scheduler.timing.cli_values import duration_type

# The one exit-code table of every command (docs/cli.md).
EXIT_OK = 0
EXIT_FINDING = 1  # the command's finding: drift, ABSENT occurrences, rejected lines (or a traceback)
EXIT_BAD_INPUT = 2  # usage: a bad flag or value, a setup the command cannot run with
EXIT_NOT_FOUND = 3
EXIT_NOT_RUNNING = EXIT_NOT_FOUND  # a local service's `status`
EXIT_CONFLICT = 4
EXIT_FORBIDDEN = 5  # not authorized, or over a quota
EXIT_UNAVAILABLE = 6  # unreachable, or no answer in time
EXIT_INTERRUPTED = 130  # Ctrl-C (SIGINT), as shells report it
UNREACHABLE = frozenset({KafkaError._TIMED_OUT, KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN,
                         KafkaError.REQUEST_TIMED_OUT})
FORBIDDEN = frozenset({KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.CLUSTER_AUTHORIZATION_FAILED,
                       KafkaError.GROUP_AUTHORIZATION_FAILED, KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                       KafkaError.SASL_AUTHENTICATION_FAILED})


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def fail(command: str, error: Exception) -> int:
    say(f"{command}: error: {error}")
    return EXIT_BAD_INPUT


def kafka_exit_code(error: KafkaException, otherwise: int = EXIT_BAD_INPUT) -> int:
    """A Kafka failure's exit code: 6 when the cluster did not answer, 5 when it refused, else `otherwise`."""
    code = error.args[0].code() if error.args and isinstance(error.args[0], KafkaError) else None
    return EXIT_UNAVAILABLE if code in UNREACHABLE else EXIT_FORBIDDEN if code in FORBIDDEN else otherwise


def add_data_dir(parser: argparse.ArgumentParser, holds: str, default: Path) -> None:
    parser.add_argument("--data-dir", type=Path, default=None, help=f"{holds} (default {default})")


def add_stop_and_status(actions: argparse._SubParsersAction, what: str, stop_help: str, holds: str, default: Path,
                        handlers: tuple[Callable[[argparse.Namespace], int], Callable[[argparse.Namespace], int]],
                        ) -> argparse.ArgumentParser:
    """The `stop` and `status` subcommands of a local service (`handlers`: theirs, in that order);
    returns the `stop` parser, for flags of the service's own."""
    stop = actions.add_parser("stop", help=stop_help)
    stop.add_argument("--timeout", type=duration_type("s", bare_unit="s"), default=30.0, metavar="DURATION",
                      help="how long before SIGKILL: a duration, or seconds (default 30s)")
    status = actions.add_parser("status", help=f"exit 0 if the {what} runs, 3 if not")
    for parser, handler in zip((stop, status), handlers, strict=True):
        add_data_dir(parser, holds, default)
        parser.set_defaults(handler=handler)
    return stop


def external_instead(env: str, says: str) -> bool:
    """With `env` set, a local service is not started: the one `env` names is, and its address goes to
    stdout as a started one's would. `says` tells why on stderr (`{}` stands for the address)."""
    value = os.environ.get(env)
    if value:
        say(f"{env} is set: {says.format(value)}")
        print(value)
    return bool(value)


def say_started(what: str, was_running: bool, began: float, pid: int | None, data_dir: Path, details: str) -> None:
    """The stderr line after a local service's `start`: how long it took (since `began`, a
    monotonic time) and `details`, or that it ran already."""
    if was_running:
        say(f"{what} already running (pid {pid}), data in {data_dir}")
    else:
        say(f"{what} started in {time.monotonic() - began:.1f}s (pid {pid}){details}")


def note_external(env: str, says: str) -> None:
    """A status is about the local service; `says` warns that `env` names another one in use."""
    value = os.environ.get(env)
    if value:
        say(f"note: {env} is set, so {says.format(value)}")


def print_status(running: str | None, data_dir: Path) -> int:
    """`status`: `running ...` (what `running` describes) and exit 0, or `stopped` and exit 3."""
    if running is None:
        print(f"stopped (data dir {data_dir})")
        return EXIT_NOT_RUNNING
    print(f"running {running}")
    return 0


def print_ensure_rows(created: Iterable[str], ok: Iterable[str], differences: Iterable[object], noun: str = "") -> None:
    """One row per object an `ensure` command looked at; DIFFERS rows are what a human must fix."""
    for name in created:
        print(f"created  {noun}{name}")
    for name in ok:
        print(f"ok       {noun}{name}")
    for difference in differences:
        print(f"DIFFERS  {noun}{difference}")


class DeprecatedAlias(argparse.Action):
    """An old flag kept for one release beside its new name: it stores into the same destination, and says
    once on stderr what to write instead, so scripts keep working and their owners learn the new grammar."""

    def __init__(self, option_strings: list[str], dest: str, replacement: str = "", **kwargs: Any) -> None:
        self.replacement = replacement
        super().__init__(option_strings, dest, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: object,
                 option_string: str | None = None) -> None:
        say(f"note: {option_string} is deprecated and will be removed; use {self.replacement} (docs/cli.md)")
        setattr(namespace, self.dest, values)


def add_renamed(parser: argparse.ArgumentParser, new: str, old: str, dest: str, new_type: Callable[[str], object],
                old_type: Callable[[str], object], help: str, example: str, default: object = None,
                metavar: str = "DURATION") -> None:
    """`new` and its deprecated alias `old` (with its own type: `--lease-ms 30000` is an integer of ms,
    `--lease 30s` a duration), exclusive of each other, into one `dest`."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument(new, dest=dest, type=new_type, default=default, help=help, metavar=metavar)
    group.add_argument(old, dest=dest, type=old_type, default=default, action=DeprecatedAlias,
                       replacement=f"{new} {example}", help=f"deprecated: use {new}")
