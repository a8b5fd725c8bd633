"""A single-node Apache Kafka (KRaft, combined broker+controller) that the project fetches and runs
itself, so development, tests and CI need neither Docker nor a preinstalled Kafka."""
from __future__ import annotations

import base64
import re
import secrets
import shutil
import subprocess
import uuid
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import ClassVar

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from scheduler import config
from scheduler.broker.jvm_process import (
    KAFKA_VERSION,
    LOG4J,
    LOGS_DIR,
    LocalJvm,
    LocalProcessError,
    java_executable,
    read_properties,
)
from scheduler.broker.ports import HOST, accepts_connections, check_port_free
from scheduler.broker.ports import free_port as free_port  # where the tests and benches take it from
from scheduler.broker.server_properties import SUPER_USER, Listeners, Quorum, server_settings
from scheduler.broker.server_properties import single_node_settings as single_node_settings  # the test brokers'
from scheduler.broker.tls import TlsFiles, ensure_tls_files, tls_files
from scheduler.dev.maven_cache import MavenError, copy_dependencies
from scheduler.kafka.clients import SCRAM_MECHANISM

# Bounded heap: the machine is shared, and a test broker needs little.
JVM_OPTS = (
    "-Xmx2g",
    "-Xms256m",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:+ExitOnOutOfMemoryError",
    "-Djava.awt.headless=true",
)
START_TIMEOUT_S = 120.0

# Files this module owns inside a data dir; `wipe` removes only these, never the dir's other content.
_PROPERTIES = "server.properties"
_CLUSTER_ID = "cluster.id"
_PID = "broker.pid"
_KRAFT_DIR = "kraft"
_ADMIN_PASSWORD = "admin.password"
_OWNED = (_PROPERTIES, _CLUSTER_ID, _PID, LOG4J, _KRAFT_DIR, LOGS_DIR, _ADMIN_PASSWORD)


class BrokerError(LocalProcessError):
    """Bad input or a missing tool; the message says what to do about it."""


def kafka_home() -> Path:
    return config.cache_dir() / f"kafka-{KAFKA_VERSION}"


def default_data_dir() -> Path:
    return config.state_home() / "broker"


def _pom_text() -> bytes:
    return (resources.files(__package__) / "kafka-pom.xml").read_bytes()


def ensure_jars() -> Path:
    """Fetch the Kafka jars with Maven once; later calls reuse the cache (scheduler/dev/maven_cache.py)."""
    try:
        return copy_dependencies(kafka_home(), "libs", _pom_text(), f"the Kafka {KAFKA_VERSION} jars")
    except MavenError as error:
        raise BrokerError(str(error)) from error


def new_cluster_id() -> str:
    """Kafka's cluster id format: 16 random bytes, URL-safe base64 without padding, not starting with '-'."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


class LocalBroker(LocalJvm):
    """One broker+controller JVM whose state (KRaft logs, pid, logs) lives in `data_dir`.

    With `sasl_port`, it also listens for SASL_PLAINTEXT (SCRAM-SHA-512) there and enforces ACLs
    (`sasl_settings`); the super user's credential is created when the storage is formatted.
    With `ssl_port`, the same SCRAM authentication over TLS (SASL_SSL), with a certificate made by
    keytool at the first start (scheduler.broker.tls): clients trust `ca_file`."""

    error = BrokerError
    command = "scheduler broker"
    properties_name = _PROPERTIES
    pid_name = _PID
    log_name = "server.log"
    main_class = "kafka.Kafka"
    jvm_opts: ClassVar[tuple[str, ...]] = JVM_OPTS
    quorum: Quorum | None = None  # set on the nodes of a LocalCluster (scheduler.broker.cluster)

    def __init__(
        self, data_dir: Path, port: int = 9092, controller_port: int | None = None, sasl_port: int | None = None,
        ssl_port: int | None = None,
    ) -> None:
        super().__init__(data_dir)
        self.port = port
        self.controller_port = controller_port if controller_port is not None else port + 1
        self.sasl_port = sasl_port
        self.ssl_port = ssl_port
        if ssl_port is not None and ssl_port in (port, self.controller_port, sasl_port):
            raise BrokerError("--ssl-port must differ from the other ports")
        for value in (self.port, self.controller_port, self.sasl_port, self.ssl_port):
            if value is not None and not 0 < value < 65536:
                raise BrokerError(f"port {value} is out of range: use 1..65535")
        if self.port == self.controller_port:
            raise BrokerError("--port and --controller-port must differ")
        if self.sasl_port in (self.port, self.controller_port):
            raise BrokerError("--sasl-port must differ from --port and --controller-port")

    @classmethod
    def from_data_dir(cls, data_dir: Path) -> LocalBroker:
        """The broker a data dir was last started with (its ports come from its server.properties)."""
        data_dir = Path(data_dir)
        listeners = read_properties(data_dir / _PROPERTIES).get("listeners", "")
        ports = dict(re.findall(r"(\w+)://[^:,]*:(\d+)", listeners))
        if "PLAINTEXT" in ports and "CONTROLLER" in ports:
            sasl_port = int(ports["SASL_PLAINTEXT"]) if "SASL_PLAINTEXT" in ports else None
            ssl_port = int(ports["SASL_SSL"]) if "SASL_SSL" in ports else None
            return cls(data_dir, int(ports["PLAINTEXT"]), int(ports["CONTROLLER"]), sasl_port, ssl_port)
        return cls(data_dir)

    @property
    def bootstrap(self) -> str:
        return f"{HOST}:{self.port}"

    @property
    def sasl_bootstrap(self) -> str | None:
        return None if self.sasl_port is None else f"{HOST}:{self.sasl_port}"

    @property
    def ssl_bootstrap(self) -> str | None:
        return None if self.ssl_port is None else f"{HOST}:{self.ssl_port}"

    @property
    def ca_file(self) -> Path:
        """The PEM certificate SASL_SSL clients verify the broker with (`ssl.ca.location`)."""
        return tls_files(self.data_dir).ca_file

    @property
    def _scram(self) -> bool:
        return self.sasl_port is not None or self.ssl_port is not None

    @property
    def admin_password_file(self) -> Path:
        return self.data_dir / _ADMIN_PASSWORD

    def admin_password(self) -> str:
        """`SUPER_USER`'s SCRAM password, generated when the data dir was formatted with a SASL port."""
        try:
            return self.admin_password_file.read_text().strip()
        except FileNotFoundError:
            raise BrokerError(
                f"{self.data_dir} was not formatted with a SASL listener: start it with --sasl-port N --wipe"
            ) from None

    def start(self, timeout: float = START_TIMEOUT_S) -> str:
        """Start in the background and return the bootstrap address once metadata requests succeed."""
        if self.launch():
            self.wait_ready(timeout)
        return self.bootstrap

    def wait_ready(self, timeout: float = START_TIMEOUT_S) -> None:
        """Until the JVM `launch` started answers metadata requests (a cluster's nodes only do once a
        majority of controllers runs, so a cluster launches them all before waiting for any)."""
        self._wait_ready("broker", timeout, self._ready_probe(), 0.2)

    def launch(self) -> bool:
        """Write the config, format the storage and start the JVM without waiting for it; False when
        this data dir's broker runs already (on the same ports, else BrokerError)."""
        running = self.pid()
        if running is not None:
            current = LocalBroker.from_data_dir(self.data_dir)
            # A SASL listener the caller did not ask for is harmless: its PLAINTEXT listener works as ever.
            if current.port != self.port or self.sasl_port not in (None, current.sasl_port):
                sasl = "" if current.sasl_port is None else f" and SASL port {current.sasl_port}"
                raise BrokerError(
                    f"a broker from {self.data_dir} already runs on port {current.port}{sasl} (pid {running}): "
                    f"stop it first with `scheduler broker stop --data-dir {self.data_dir}`"
                )
            return False
        for flag, port in (("--port", self.port), ("--controller-port", self.controller_port),
                           ("--sasl-port", self.sasl_port), ("--ssl-port", self.ssl_port)):
            if port is not None:
                check_port_free(port, flag, BrokerError)
        java = java_executable(BrokerError)
        libs = ensure_jars()
        self._check_formatted_data_fits()
        self._write_config(ensure_tls_files(self.data_dir, java) if self.ssl_port is not None else None)
        self._format_storage(java, libs)
        self._launch(java, libs)
        return True

    def restart(self, timeout: float = START_TIMEOUT_S) -> str:
        self.stop()
        return self.start(timeout)

    def wipe(self) -> None:
        """Delete the broker's data (topics, offsets, cluster id); refuses while it runs."""
        if self.is_running():
            raise BrokerError(f"the broker from {self.data_dir} is running: stop it before wiping its data")
        for name in _OWNED:
            path = self.data_dir / name
            if path.is_dir():
                shutil.rmtree(path)
            else:
                path.unlink(missing_ok=True)

    def _check_formatted_data_fits(self) -> None:
        """The formatted KRaft log records the controller's endpoint (so it cannot move silently) and
        the super user's SCRAM credential (so SASL cannot be added to data formatted without it)."""
        if not (self.data_dir / _KRAFT_DIR / "meta.properties").exists():
            return
        previous = LocalBroker.from_data_dir(self.data_dir).controller_port
        if previous != self.controller_port:
            raise BrokerError(
                f"the data in {self.data_dir} was formatted for controller port {previous}: "
                f"start with --controller-port {previous}, or add --wipe to start afresh"
            )
        if self._scram and not self.admin_password_file.exists():
            raise BrokerError(
                f"the data in {self.data_dir} was formatted without a SASL listener, so it has no "
                f"`{SUPER_USER}` credential: add --wipe to start afresh with --sasl-port"
            )

    def _write_config(self, tls: TlsFiles | None) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        cluster_id_file = self.data_dir / _CLUSTER_ID
        if not cluster_id_file.exists():
            cluster_id_file.write_text(new_cluster_id() + "\n")
        ports = Listeners(self.port, self.controller_port, self.sasl_port, self.ssl_port)
        self._write_properties((resources.files(__package__) / LOG4J).read_bytes(),
                               server_settings(ports, self.data_dir / _KRAFT_DIR, tls, self.quorum))

    def _format_storage(self, java: str, libs: Path) -> None:
        if (self.data_dir / _KRAFT_DIR / "meta.properties").exists():
            return  # formatted before; skipping saves a JVM start
        cluster_id = (self.data_dir / _CLUSTER_ID).read_text().strip()
        command = [java, "-Xmx256m", "-cp", f"{libs}/*", *self._java_logging(), "kafka.tools.StorageTool", "format",
                   "-t", cluster_id, "-c", str(self._properties_file), "--ignore-formatted"]
        if self.quorum is None:
            command.append("--standalone")  # a cluster's nodes share a static quorum (controller.quorum.voters)
        if self._scram:
            # The first SASL client needs a credential before any ACL exists: it goes into the metadata log.
            command += ["--add-scram", f"{SCRAM_MECHANISM}=[name={SUPER_USER},password={self._new_admin_password()}]"]
        result = subprocess.run(command, capture_output=True, text=True)
        if result.returncode != 0:
            raise BrokerError(
                f"formatting KRaft storage in {self.data_dir / _KRAFT_DIR} failed "
                f"(add --wipe to start afresh):\n{(result.stdout + result.stderr).strip()}"
            )

    def _new_admin_password(self) -> str:
        """URL-safe, so it needs no quoting in `--add-scram`; readable by the data dir's owner only."""
        password = secrets.token_urlsafe(24)
        self.admin_password_file.unlink(missing_ok=True)
        self.admin_password_file.touch(mode=0o600)
        self.admin_password_file.write_text(password + "\n")
        return password

    def _ready_probe(self) -> Callable[[], bool]:
        """Metadata answered; the admin client is made only once the port accepts connections, so a
        broker still starting does not fill stderr with librdkafka's connection-refused lines."""
        admin: AdminClient | None = None

        def ready() -> bool:
            nonlocal admin
            if admin is None and accepts_connections(self.port):
                admin = AdminClient({"bootstrap.servers": self.bootstrap})
            return admin is not None and _answers_metadata(admin)

        return ready


def _answers_metadata(admin: AdminClient) -> bool:
    try:
        return bool(admin.list_topics(timeout=2).brokers)
    except KafkaException:
        return False
