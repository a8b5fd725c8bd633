"""A Kafka Connect worker (Apache Kafka's ConnectDistributed) that the project fetches and runs
itself, like the broker (scheduler/broker/local.py): pid file, log and config in a data dir.

Distributed mode even for one worker: connector configs, offsets and statuses live in Kafka
topics under the topic prefix, so a killed worker restarts where it was and a second worker
would share the load."""
from __future__ import annotations

import re
from importlib import resources
from pathlib import Path

from confluent_kafka import KafkaException

from scheduler import config
from scheduler.broker.jvm_process import LOG4J, LocalJvm, LocalProcessError, java_executable, read_properties
from scheduler.broker.ports import HOST, accepts_connections, check_port_free
from scheduler.connect import artifacts
from scheduler.connect.rest import ConnectRest, ConnectRestError
from scheduler.dev.maven_cache import MavenError
from scheduler.kafka.admin import cluster_replication
from scheduler.kafka.replication import Replication, ReplicationError

DEFAULT_PORT = 8083
# Bounded heap: the machine is shared; one worker with a few sink tasks needs little.
JVM_OPTS = ("-Xmx768m", "-Xms128m", "-XX:+UseG1GC", "-XX:+ExitOnOutOfMemoryError", "-Djava.awt.headless=true")
START_TIMEOUT_S = 180.0
MAIN_CLASS = "org.apache.kafka.connect.cli.ConnectDistributed"


class ConnectError(LocalProcessError):
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


def worker_settings(bootstrap: str, prefix: str, port: int, plugin_path: list[Path], replication: Replication,
                    host: str = HOST) -> dict[str, str]:
    """The worker's properties; `host` is where the REST API listens and what it advertises. Its internal
    topics (created by the worker when missing) get the project's replication and min.insync.replicas
    (`<topic kind>.storage.<topic config>`, Connect's internal topic settings), not the broker's defaults."""
    return {
        "bootstrap.servers": bootstrap,
        "group.id": f"{prefix}.connect",
        **internal_topics(prefix),
        **{f"{kind}.storage.{key}": value for kind in ("config", "offset", "status")
           for key, value in (("replication.factor", str(replication.factor)),
                              ("min.insync.replicas", str(replication.min_insync)))},
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


class LocalConnect(LocalJvm):
    """One Connect worker JVM whose config, pid and logs live in `data_dir`."""

    error = ConnectError
    command = "scheduler connect"
    properties_name = "connect.properties"
    pid_name = "connect.pid"
    log_name = "connect.log"
    main_class = MAIN_CLASS
    jvm_opts = JVM_OPTS

    def __init__(self, data_dir: Path, bootstrap: str, prefix: str, port: int = DEFAULT_PORT) -> None:
        if not 0 < port < 65536:
            raise ConnectError(f"port {port} is out of range: use 1..65535")
        super().__init__(data_dir)
        self.bootstrap = bootstrap
        self.prefix = prefix
        self.port = port

    @classmethod
    def from_data_dir(cls, data_dir: Path) -> LocalConnect:
        """The worker a data dir was last started with (its settings come from its properties file)."""
        settings = read_properties(Path(data_dir) / cls.properties_name)
        match = re.search(r":(\d+)$", settings.get("listeners", ""))
        prefix = settings.get("group.id", f"{config.DEFAULT_PREFIX}.connect").removesuffix(".connect")
        port = int(match.group(1)) if match else DEFAULT_PORT
        return cls(data_dir, settings.get("bootstrap.servers", config.DEFAULT_BOOTSTRAP), prefix, port)

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

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
        check_port_free(self.port, "--port", ConnectError)
        java = java_executable(ConnectError)
        try:
            replication = cluster_replication(self.bootstrap)
        except (ReplicationError, KafkaException) as error:
            raise ConnectError(f"cannot decide the replication of the worker's topics: {error}") from error
        try:
            libs = artifacts.ensure_worker_jars()
            plugins = artifacts.ensure_plugins()
        except MavenError as error:
            raise ConnectError(str(error)) from error
        self._write_properties((resources.files(__package__) / LOG4J).read_bytes(),
                               worker_settings(self.bootstrap, self.prefix, self.port, plugins, replication))
        self._launch(java, libs)
        rest = ConnectRest(self.url)
        self._wait_ready("Connect worker", timeout, lambda: accepts_connections(self.port) and worker_ready(rest), 0.3)
        return self.url


def worker_ready(rest: ConnectRest) -> bool:
    """The REST server answers before the worker has read its config topic; /connectors waits for it."""
    try:
        rest.connectors()
        return True
    except ConnectRestError:
        return False
