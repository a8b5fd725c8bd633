"""The console served for real (uvicorn on a free port) over a running scheduler, for the browser tests."""
from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import uvicorn
from control_env import ControlEnv

from scheduler.api.app import create_app
from scheduler.api.keys import KeyStore
from scheduler.broker.local import free_port
from scheduler.console.follower import ConsoleIndexes
from scheduler.console.web import Console, mount


@dataclass
class ConsoleServer:
    env: ControlEnv
    url: str
    console: Console
    indexes: ConsoleIndexes


def console_server(env: ControlEnv, metrics_urls: list[str] | None = None) -> Iterator[ConsoleServer]:
    keys = KeyStore(env.key_file)
    indexes = ConsoleIndexes(env.plane.schedules, env.plane.occurrences)
    app = create_app(env.plane, keys)
    console = mount(app, env.plane, keys, indexes, metrics_urls)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, name="console-http", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the console's HTTP server did not start")
        time.sleep(0.05)
    try:
        yield ConsoleServer(env, f"http://127.0.0.1:{port}", console, indexes)
    finally:
        server.should_exit = True
        thread.join(15)
        indexes.close()
