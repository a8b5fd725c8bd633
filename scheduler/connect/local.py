"""A Kafka Connect worker (Apache Kafka's ConnectDistributed) that the project fetches and runs
itself, like the broker (scheduler/broker/local.py): pid file, log and config in a data dir.

Distributed mode even for one worker: connector configs, offsets and statuses live in Kafka
topics under the topic prefix, so a killed worker restarts where it was and a second worker
would share the load."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from importlib import resources
from pathlib import Path

from scheduler import config
from scheduler.broker.local import (
    HOST,
    accepts_connections,
    check_port_free,
    java_executable,
    jvm_alive,
    log_tail,
    read_pid_file,
    read_properties,
)
from scheduler.connect import artifacts
from scheduler.connect.rest import ConnectRest, ConnectRestError
from scheduler.dev.maven_cache import MavenError

DEFAULT_PORT = 8083
# Bounded heap: the machine is shared; one worker with a few sink tasks needs little.
JVM_OPTS = ("-Xmx768m", "-Xms128m", "-XX:+UseG1GC", "-XX:+ExitOnOutOfMemoryError", "-Djava.awt.headless=true")
START_TIMEOUT_S = 180.0
STOP_TIMEOUT_S = 30.0
MAIN_CLASS = "org.apache.kafka.connect.cli.ConnectDistributed"

_PROPERTIES = "connect.properties"
_PID = "connect.pid"
_LOG4J = "log4j2.xml"
_LOGS_DIR = "logs"


class ConnectError(Exception):
    """Bad input, a missing tool or a worker that would not start; the message says what to do."""


def default_data_dir() -> Path:
    return config.state_home() / "connect"


def internal_topics(prefix: str) -> dict[str, str]:
    """The worker's own topics, under the scheduler's topic prefix so deployments do not mix."""
    return {
        "config.storage.topic": f"{prefix}.connect-configs",
        "offset.storage.topic": f"{prefix}.connect-offsets",
        "status.storage.topic": f"{prefix}.connect-status",
    }


def worker_settings(bootstrap: str, prefix: str, port: int, plugin_path: list[Path],
                    host: str = HOST) -> dict[str, str]:
    """The worker's properties; `host` is where the REST API listens and what it advertises."""
    return {
        "bootstrap.servers": bootstrap,
        "group.id": f"{prefix}.connect",
        **internal_topics(prefix),
        "config.storage.replication.factor": "-1",
        "offset.storage.replication.factor": "-1",
        "status.storage.replication.factor": "-1",
        "offset.storage.partitions": "3",
        "status.storage.partitions": "1",
        "key.converter": "org.apache.kafka.connect.converters.ByteArrayConverter",
        "value.converter": "org.apache.kafka.connect.converters.ByteArrayConverter",
        "listeners": f"http://{'0.0.0.0' if host != HOST else HOST}:{port}",
        "rest.advertised.host.name": host,
        "rest.advertised.port": str(port),
        "plugin.path": ",".join(str(path) for path in plugin_path),
        # Plugins are found through their META-INF/services manifests: the reflective scan costs ~10 s.
        "plugin.discovery": "service_load",
        # Lets each sink read with isolation.level=read_committed (the scheduler writes transactionally).
        "connector.client.config.override.policy": "All",
        # Sink offsets are committed at this interval: after a crash at most this much is re-read.
        "offset.flush.interval.ms": "1000",
        # A worker that died is noticed in seconds, and its tasks are reassigned at once, not after 5 min.
        "session.timeout.ms": "6000",
        "heartbeat.interval.ms": "2000",
        "scheduled.rebalance.max.delay.ms": "0",
    }


class LocalConnect:
    """One Connect worker JVM whose config, pid and logs live in `data_dir`."""

    def __init__(self, data_dir: Path, bootstrap: str, prefix: str, port: int = DEFAULT_PORT) -> None:
        if not 0 < port < 65536:
            raise ConnectError(f"port {port} is out of range: use 1..65535")
        self.data_dir = Path(data_dir).resolve()
        self.bootstrap = bootstrap
        self.prefix = prefix
        self.port = port
        self._process: subprocess.Popen[bytes] | None = None

    @classmethod
    def from_data_dir(cls, data_dir: Path) -> LocalConnect:
        """The worker a data dir was last started with (its settings come from its properties file)."""
        settings = read_properties(Path(data_dir) / _PROPERTIES)
        match = re.search(r":(\d+)$", settings.get("listeners", ""))
        prefix = settings.get("group.id", f"{config.DEFAULT_PREFIX}.connect").removesuffix(".connect")
        port = int(match.group(1)) if match else DEFAULT_PORT
        return cls(data_dir, settings.get("bootstrap.servers", config.DEFAULT_BOOTSTRAP), prefix, port)

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def log_file(self) -> Path:
        return self.data_dir / _LOGS_DIR / "connect.log"

    @property
    def console_file(self) -> Path:
        return self.data_dir / _LOGS_DIR / "console.log"

    @property
    def _pid_file(self) -> Path:
        return self.data_dir / _PID

    @property
    def _properties_file(self) -> Path:
        return self.data_dir / _PROPERTIES

    def pid(self) -> int | None:
        pid = read_pid_file(self._pid_file)
        if pid is None:
            return None
        if self._process is not None and self._process.pid == pid:
            return pid if self._process.poll() is None else None
        return pid if jvm_alive(pid, self._properties_file) else None

    def is_running(self) -> bool:
        return self.pid() is not None

    def start(self, timeout: float = START_TIMEOUT_S) -> str:
        """Start in the background; return the REST URL once the worker has joined its group."""
        running = self.pid()
        if running is not None:
            current = LocalConnect.from_data_dir(self.data_dir)
            if current.port != self.port or current.bootstrap != self.bootstrap:
                raise ConnectError(
                    f"a Connect worker from {self.data_dir} already runs on port {current.port} against "
                    f"{current.bootstrap} (pid {running}): stop it first with "
                    f"`scheduler connect stop --data-dir {self.data_dir}`"
                )
            return self.url
        check_port_free(self.port, "--port")
        java = java_executable()
        try:
            libs = artifacts.ensure_worker_jars()
            plugins = artifacts.ensure_plugins()
        except MavenError as error:
            raise ConnectError(str(error)) from error
        self._write_config(plugins)
        self._launch(java, libs)
        self._wait_ready(timeout)
        return self.url

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> bool:
        """SIGTERM (tasks commit their offsets), SIGKILL after `timeout`; whether one was running."""
        return self._signal(signal.SIGTERM, timeout)

    def kill(self) -> bool:
        """SIGKILL, as in a crash: uncommitted sink offsets are re-read by the next worker."""
        return self._signal(signal.SIGKILL, 10.0)

    def _signal(self, sig: signal.Signals, timeout: float) -> bool:
        pid = self.pid()
        if pid is None:
            self._forget()
            return False
        os.kill(pid, sig)
        if not self._wait_exit(timeout):
            os.kill(pid, signal.SIGKILL)
            self._wait_exit(10.0)
        self._forget()
        return True

    def _wait_exit(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.pid() is None:
                return True
            time.sleep(0.1)
        return self.pid() is None

    def _forget(self) -> None:
        self._pid_file.unlink(missing_ok=True)
        if self._process is not None:
            self._process.poll()
        self._process = None

    def _write_config(self, plugins: list[Path]) -> None:
        (self.data_dir / _LOGS_DIR).mkdir(parents=True, exist_ok=True)
        (self.data_dir / _LOG4J).write_bytes((resources.files(__package__) / "log4j2.xml").read_bytes())
        settings = worker_settings(self.bootstrap, self.prefix, self.port, plugins)
        text = "".join(f"{key}={value}\n" for key, value in settings.items())
        self._properties_file.write_text("# written by `scheduler connect start`; edits are overwritten\n" + text)

    def _launch(self, java: str, libs: Path) -> None:
        command = [java, *JVM_OPTS, f"-Dlog4j2.configurationFile={self.data_dir / _LOG4J}",
                   f"-Dkafka.logs.dir={self.data_dir / _LOGS_DIR}", "-cp", f"{libs}/*", MAIN_CLASS,
                   str(self._properties_file)]
        with open(self.console_file, "ab") as console:
            self._process = subprocess.Popen(command, cwd=self.data_dir, stdin=subprocess.DEVNULL, stdout=console,
                                             stderr=subprocess.STDOUT, start_new_session=True)
        self._pid_file.write_text(f"{self._process.pid}\n")

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        rest = ConnectRest(self.url)
        while time.monotonic() < deadline:
            if self._process is not None and self._process.poll() is not None:
                code = self._process.returncode
                self._forget()
                raise ConnectError(f"the Connect worker exited during startup with code {code}; last lines of "
                                   f"{self.console_file} and {self.log_file}:\n{self._log_tail()}")
            if accepts_connections(self.port) and worker_ready(rest):
                return
            time.sleep(0.3)
        self.kill()
        raise ConnectError(f"the Connect worker did not answer within {timeout:.0f}s and was killed; "
                           f"see {self.log_file}:\n{self._log_tail()}")

    def _log_tail(self, lines: int = 15) -> str:
        return log_tail((self.console_file, self.log_file), lines)


def worker_ready(rest: ConnectRest) -> bool:
    """The REST server answers before the worker has read its config topic; /connectors waits for it."""
    try:
        rest.connectors()
        return True
    except ConnectRestError:
        return False
