"""Addresses on 127.0.0.1 that refuse connections for the whole test session.

A port that `free_port()` found free is free only at that instant: a broker, Connect worker or
PostgreSQL the session starts later may be given the same port by the kernel, and a test that
expected "unreachable" then talks to a live service (stop 42's CI: `topics ensure` against a
"closed" port created twelve topics). A socket that is bound but never listens answers every
connect with ECONNREFUSED, and while it stays bound the kernel hands its port to nobody else."""
from __future__ import annotations

import socket

HOST = "127.0.0.1"
_held: list[socket.socket] = []


def closed_port() -> int:
    """A port that stays bound, unlistened, until the test process exits."""
    holder = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    holder.bind((HOST, 0))
    _held.append(holder)
    return int(holder.getsockname()[1])


def closed_address() -> str:
    return f"{HOST}:{closed_port()}"
