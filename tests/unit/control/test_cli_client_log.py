"""A control command against an unreachable broker says so in one line, with its usual exit code;
librdkafka's own log (a line per failed connection attempt, hundreds while the command waits) only
with --verbose. No broker: the port is held bound and never listened on, so connections are refused."""
from __future__ import annotations

import argparse
import subprocess
import sys

from confluent_kafka import KafkaError, KafkaException

from helpers.closed_ports import closed_address
from scheduler.control.cli_common import EXIT_ERROR, EXIT_UNAVAILABLE, guarded


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "scheduler", "schedules", "list", "--tenant", "t",
               "--bootstrap", closed_address(), "--timeout", "3", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


def test_unreachable_broker_is_one_error_line_and_exit_6() -> None:
    done = run_cli()
    assert done.returncode == EXIT_UNAVAILABLE == 6, done.stderr[-2000:]
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr[-2000:]
    assert lines[0].startswith("error: UNAVAILABLE: cannot reach the cluster")


def test_verbose_shows_librdkafkas_own_log() -> None:
    done = run_cli("--verbose")
    assert done.returncode == EXIT_UNAVAILABLE
    lines = done.stderr.splitlines()
    assert any("Connection refused" in line and "rdkafka#" in line for line in lines), done.stderr[-2000:]
    assert lines[-1].startswith("error: UNAVAILABLE: cannot reach the cluster")


def test_a_kafka_error_the_client_does_not_map_is_one_line_with_the_tables_exit_code(capsys) -> None:
    """A view's first metadata request (e.g. `tenants list`) raised through as a traceback, exit 1; now one
    line, and the exit code of docs/cli.md: 6 unreachable (it was 1 before issue 33), 5 refused, else 1."""
    def failing(code: int):
        def handler(_args: argparse.Namespace) -> int:
            raise KafkaException(KafkaError(code, "Failed to get metadata"))
        return handler

    args = argparse.Namespace(json=False, bootstrap="127.0.0.1:1")
    assert guarded(failing(KafkaError._TRANSPORT))(args) == EXIT_UNAVAILABLE == 6
    assert capsys.readouterr().err.splitlines() == [
        "error: _TRANSPORT: Failed to get metadata (Kafka at 127.0.0.1:1)"]
    assert guarded(failing(KafkaError.TOPIC_AUTHORIZATION_FAILED))(args) == 5
    assert guarded(failing(KafkaError.INVALID_CONFIG))(args) == EXIT_ERROR == 1
