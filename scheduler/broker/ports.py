"""Ports on 127.0.0.1 for the services the project starts itself (broker, Connect, PostgreSQL).

A port is checked before the service is launched, because the service's own bind error would only
show up in its log file."""
from __future__ import annotations

import errno
import socket

HOST = "127.0.0.1"


def check_port_free(port: int, flag: str, error: type[Exception]) -> None:
    """Raise `error` (the caller's kind, so its CLI reports it) when `port` cannot be bound."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        # Same option the JVM sets, so connections lingering in TIME_WAIT do not count as taken.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((HOST, port))
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                raise error(f"cannot use {HOST}:{port} ({exc.strerror}); choose another with {flag} N") from exc
            raise error(
                f"port {port} on {HOST} is already in use: stop whatever listens there "
                f"(`ss -ltnp 'sport = :{port}'` shows it; a broker from another data dir stops with "
                f"`scheduler broker stop --data-dir DIR`), or choose another port with {flag} N"
            ) from exc


def free_port() -> int:
    """A port nobody listens on right now, for brokers that must not collide (tests, demos)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((HOST, 0))
        return probe.getsockname()[1]


def accepts_connections(port: int) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=0.5):
            return True
    except OSError:
        return False
