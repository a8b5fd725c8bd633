"""A single-node Apache Kafka (KRaft, combined broker+controller) that the project fetches and runs
itself, so development, tests and CI need neither Docker nor a preinstalled Kafka."""
from __future__ import annotations

import base64
import errno
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import time
import uuid
from importlib import resources
from pathlib import Path

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from scheduler import config
from scheduler.kafka.clients import SCRAM_MECHANISM
from scheduler.broker.tls import TlsFiles, ensure_tls_files, tls_files
from scheduler.dev.maven_cache import MavenError, copy_dependencies

KAFKA_VERSION = "4.2.0"
MIN_JAVA_MAJOR = 17
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
STOP_TIMEOUT_S = 30.0
HOST = "127.0.0.1"
SUPER_USER = "admin"

# Files this module owns inside a data dir; `wipe` removes only these, never the dir's other content.
_PROPERTIES = "server.properties"
_CLUSTER_ID = "cluster.id"
_PID = "broker.pid"
_LOG4J = "log4j2.xml"
_KRAFT_DIR = "kraft"
_LOGS_DIR = "logs"
_ADMIN_PASSWORD = "admin.password"
_OWNED = (_PROPERTIES, _CLUSTER_ID, _PID, _LOG4J, _KRAFT_DIR, _LOGS_DIR, _ADMIN_PASSWORD)


class BrokerError(Exception):
    """Bad input or a missing tool; the message says what to do about it."""


def single_node_settings() -> dict[str, str]:
    """Broker settings that make transactions, compaction and share groups work on one node.

    Shared with the testcontainers fallback so both test brokers behave alike."""
    return {
        "num.partitions": "1",
        "default.replication.factor": "1",
        "min.insync.replicas": "1",
        "auto.create.topics.enable": "false",
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "4",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "transaction.state.log.num.partitions": "4",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        "share.coordinator.state.topic.num.partitions": "4",
        "group.initial.rebalance.delay.ms": "0",
        # Workers may detect a dead member faster than Kafka's 6 s floor: a retry after a lost lease
        # lands on the dead worker's partition, read again only once the group has noticed.
        "group.min.session.timeout.ms": "1000",
        # After a crash the restarted node may re-register only once its old session expired (default 9 s).
        "broker.session.timeout.ms": "4000",
        "broker.heartbeat.interval.ms": "1000",
        "log.cleaner.backoff.ms": "1000",
        "log.cleaner.threads": "1",
        "log.cleaner.dedupe.buffer.size": str(32 * 1024 * 1024),
        # Index files of 1 MiB, not 10: each is preallocated sparse and memory-mapped, and its first write
        # faults in up to the disk's read-ahead of zeroed pages (docs/decisions/0003-index-file-size.md).
        "log.index.size.max.bytes": str(1024 * 1024),
    }


def sasl_settings() -> dict[str, str]:
    """SCRAM on the SASL_PLAINTEXT listener, and ACLs enforced on every listener.

    The PLAINTEXT and CONTROLLER listeners (bound to 127.0.0.1) authenticate nobody, so their
    principal User:ANONYMOUS is a super user: the scheduler, the control plane and the broker's own
    controller traffic are trusted local services. Tenants' workers connect through SASL, where
    their ACLs apply; `SUPER_USER` is the operator's identity on that listener."""
    return {
        "sasl.enabled.mechanisms": SCRAM_MECHANISM,
        f"listener.name.sasl_plaintext.{SCRAM_MECHANISM.lower()}.sasl.jaas.config":
            "org.apache.kafka.common.security.scram.ScramLoginModule required;",
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "allow.everyone.if.no.acl.found": "false",
        "super.users": f"User:{SUPER_USER};User:ANONYMOUS",
    }


def ssl_settings(tls: TlsFiles) -> dict[str, str]:
    """The SASL_SSL listener: SCRAM as on SASL_PLAINTEXT, inside TLS with the keytool-made keystore."""
    listener = "listener.name.sasl_ssl."
    return {
        f"{listener}{SCRAM_MECHANISM.lower()}.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required;",
        f"{listener}ssl.keystore.location": str(tls.keystore),
        f"{listener}ssl.keystore.type": "PKCS12",
        f"{listener}ssl.keystore.password": tls.password,
        f"{listener}ssl.key.password": tls.password,
    }


def kafka_home() -> Path:
    return config.cache_dir() / f"kafka-{KAFKA_VERSION}"


def default_data_dir() -> Path:
    return config.state_home() / "broker"


def _require_tool(name: str, hint: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise BrokerError(f"`{name}` was not found on PATH: {hint}")
    return path


def java_executable() -> str:
    """The `java` on PATH, checked to be new enough for Kafka 4 before anything is downloaded."""
    java = _require_tool(
        "java",
        f"install a Java runtime {MIN_JAVA_MAJOR} or newer "
        "(e.g. `apt-get install openjdk-17-jre-headless`) and put its bin directory on PATH",
    )
    major = _java_major_version(java)
    if major < MIN_JAVA_MAJOR:
        raise BrokerError(
            f"{java} is Java {major}; Kafka {KAFKA_VERSION} needs Java {MIN_JAVA_MAJOR} or newer: "
            f"install it (e.g. `apt-get install openjdk-17-jre-headless`) and put it first on PATH"
        )
    return java


def _java_major_version(java: str) -> int:
    result = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60)
    match = re.search(r'version "(\d+)(?:\.(\d+))?', result.stderr + result.stdout)
    if match is None:
        raise BrokerError(f"could not tell which Java {java} is: {(result.stderr or result.stdout).strip()}")
    major, minor = int(match.group(1)), int(match.group(2) or 0)
    return minor if major == 1 else major  # "1.8.0" is Java 8


def _pom_text() -> bytes:
    return (resources.files(__package__) / "kafka-pom.xml").read_bytes()


def ensure_jars() -> Path:
    """Fetch the Kafka jars with Maven once; later calls reuse the cache (scheduler/dev/maven_cache.py)."""
    try:
        return copy_dependencies(kafka_home(), "libs", _pom_text(), f"the Kafka {KAFKA_VERSION} jars")
    except MavenError as error:
        raise BrokerError(str(error)) from error


def check_port_free(port: int, flag: str) -> None:
    """Fail before launching Java, whose own bind error would only show up in a log file."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        # Same option the JVM sets, so connections lingering in TIME_WAIT do not count as taken.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((HOST, port))
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                raise BrokerError(f"cannot use {HOST}:{port} ({exc.strerror}); choose another with {flag} N") from exc
            raise BrokerError(
                f"port {port} on {HOST} is already in use: stop whatever listens there "
                f"(`ss -ltnp 'sport = :{port}'` shows it; a broker from another data dir stops with "
                f"`scheduler broker stop --data-dir DIR`), or choose another port with {flag} N"
            ) from exc


def free_port() -> int:
    """A port nobody listens on right now, for brokers that must not collide (tests, demos)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((HOST, 0))
        return probe.getsockname()[1]


def new_cluster_id() -> str:
    """Kafka's cluster id format: 16 random bytes, URL-safe base64 without padding, not starting with '-'."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


class LocalBroker:
    """One broker+controller JVM whose state (KRaft logs, pid, logs) lives in `data_dir`.

    With `sasl_port`, it also listens for SASL_PLAINTEXT (SCRAM-SHA-512) there and enforces ACLs
    (`sasl_settings`); the super user's credential is created when the storage is formatted.
    With `ssl_port`, the same SCRAM authentication over TLS (SASL_SSL), with a certificate made by
    keytool at the first start (scheduler.broker.tls): clients trust `ca_file`."""

    def __init__(
        self, data_dir: Path, port: int = 9092, controller_port: int | None = None, sasl_port: int | None = None,
        ssl_port: int | None = None,
    ) -> None:
        self.data_dir = Path(data_dir).resolve()
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
        self._process: subprocess.Popen[bytes] | None = None

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

    @property
    def log_file(self) -> Path:
        return self.data_dir / _LOGS_DIR / "server.log"

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
        """The pid of this data dir's running broker, or None (a stale pid file does not count)."""
        pid = read_pid_file(self._pid_file)
        return pid if pid is not None and self._alive(pid) else None

    def is_running(self) -> bool:
        return self.pid() is not None

    def start(self, timeout: float = START_TIMEOUT_S) -> str:
        """Start in the background and return the bootstrap address once metadata requests succeed."""
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
            return self.bootstrap
        check_port_free(self.port, "--port")
        check_port_free(self.controller_port, "--controller-port")
        if self.sasl_port is not None:
            check_port_free(self.sasl_port, "--sasl-port")
        if self.ssl_port is not None:
            check_port_free(self.ssl_port, "--ssl-port")
        java = java_executable()
        libs = ensure_jars()
        self._check_formatted_data_fits()
        self._write_config(ensure_tls_files(self.data_dir, java) if self.ssl_port is not None else None)
        self._format_storage(java, libs)
        self._launch(java, libs)
        self._wait_ready(timeout)
        return self.bootstrap

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> bool:
        """SIGTERM for a controlled shutdown, SIGKILL if it takes longer than `timeout`.

        Returns whether a broker was running."""
        pid = self.pid()
        if pid is None:
            self._forget()
            return False
        os.kill(pid, signal.SIGTERM)
        if not self._wait_exit(pid, timeout):
            os.kill(pid, signal.SIGKILL)
            self._wait_exit(pid, 10.0)
        self._forget()
        return True

    def kill(self) -> bool:
        """SIGKILL, as in a crash: no controlled shutdown, so recovery runs on the next start."""
        pid = self.pid()
        if pid is None:
            self._forget()
            return False
        os.kill(pid, signal.SIGKILL)
        self._wait_exit(pid, 10.0)
        self._forget()
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

    def _alive(self, pid: int) -> bool:
        if self._process is not None and self._process.pid == pid:
            return self._process.poll() is None
        return jvm_alive(pid, self._properties_file)

    def _wait_exit(self, pid: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self._alive(pid):
                return True
            time.sleep(0.1)
        return not self._alive(pid)

    def _forget(self) -> None:
        self._pid_file.unlink(missing_ok=True)
        self._process = None

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
        (self.data_dir / _LOGS_DIR).mkdir(parents=True, exist_ok=True)
        (self.data_dir / _LOG4J).write_bytes((resources.files(__package__) / "log4j2.xml").read_bytes())
        cluster_id_file = self.data_dir / _CLUSTER_ID
        if not cluster_id_file.exists():
            cluster_id_file.write_text(new_cluster_id() + "\n")
        kraft = self.data_dir / _KRAFT_DIR
        ports = {"PLAINTEXT": self.port, "CONTROLLER": self.controller_port}
        protocols = {"CONTROLLER": "PLAINTEXT", "PLAINTEXT": "PLAINTEXT"}
        if self.sasl_port is not None:
            ports["SASL_PLAINTEXT"] = self.sasl_port
            protocols["SASL_PLAINTEXT"] = "SASL_PLAINTEXT"
        if self.ssl_port is not None:
            ports["SASL_SSL"] = self.ssl_port
            protocols["SASL_SSL"] = "SASL_SSL"
        listeners = ",".join(f"{name}://{HOST}:{port}" for name, port in ports.items())
        settings = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.bootstrap.servers": f"{HOST}:{self.controller_port}",
            "listeners": listeners,
            "advertised.listeners": listeners,
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": ",".join(f"{name}:{kind}" for name, kind in protocols.items()),
            "log.dirs": str(kraft),
            "metadata.log.dir": str(kraft),
            **single_node_settings(),
            **(sasl_settings() if self._scram else {}),
            **(ssl_settings(tls) if tls is not None else {}),
        }
        text = "".join(f"{key}={value}\n" for key, value in settings.items())
        self._properties_file.write_text("# written by `scheduler broker start`; edits are overwritten\n" + text)

    def _format_storage(self, java: str, libs: Path) -> None:
        if (self.data_dir / _KRAFT_DIR / "meta.properties").exists():
            return  # formatted before; skipping saves a JVM start
        cluster_id = (self.data_dir / _CLUSTER_ID).read_text().strip()
        command = [java, "-Xmx256m", "-cp", f"{libs}/*", f"-Dlog4j2.configurationFile={self.data_dir / _LOG4J}",
                   f"-Dkafka.logs.dir={self.data_dir / _LOGS_DIR}", "kafka.tools.StorageTool", "format",
                   "-t", cluster_id, "-c", str(self._properties_file), "--standalone", "--ignore-formatted"]
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

    def _launch(self, java: str, libs: Path) -> None:
        command = [
            java,
            *JVM_OPTS,
            f"-Dlog4j2.configurationFile={self.data_dir / _LOG4J}",
            f"-Dkafka.logs.dir={self.data_dir / _LOGS_DIR}",
            "-cp",
            f"{libs}/*",
            "kafka.Kafka",
            str(self._properties_file),
        ]
        with open(self.console_file, "ab") as console:
            self._process = subprocess.Popen(
                command,
                cwd=self.data_dir,
                stdin=subprocess.DEVNULL,
                stdout=console,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # survives the terminal or CLI process that started it
            )
        self._pid_file.write_text(f"{self._process.pid}\n")

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        admin: AdminClient | None = None
        while time.monotonic() < deadline:
            if self._process is not None and self._process.poll() is not None:
                code = self._process.returncode
                self._forget()
                raise BrokerError(
                    f"the broker exited during startup with code {code}; "
                    f"last lines of {self.console_file} and {self.log_file}:\n{self._log_tail()}"
                )
            if admin is None and accepts_connections(self.port):
                admin = AdminClient({"bootstrap.servers": self.bootstrap})
            if admin is not None and _answers_metadata(admin):
                return
            time.sleep(0.2)
        self.kill()
        raise BrokerError(
            f"the broker did not answer within {timeout:.0f}s and was killed; "
            f"see {self.console_file} and {self.log_file}:\n{self._log_tail()}"
        )

    def _log_tail(self, lines: int = 15) -> str:
        return log_tail((self.console_file, self.log_file), lines)


def read_pid_file(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (FileNotFoundError, ValueError, IndexError):
        return None


def log_tail(paths: tuple[Path, ...], lines: int = 15) -> str:
    """The last `lines` of each file that exists, for error messages about a process that died."""
    chunks: list[str] = []
    for path in paths:
        if path.exists():
            chunks.extend(path.read_text(errors="replace").splitlines()[-lines:])
    return "\n".join(chunks)


def jvm_alive(pid: int, config_file: Path) -> bool:
    """Whether `pid` is still the JVM started with `config_file` on its command line."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    proc = Path("/proc") / str(pid)
    try:
        state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        threads = len(list((proc / "task").iterdir()))
        cmdline = (proc / "cmdline").read_bytes().split(b"\0")
    except (FileNotFoundError, IndexError):
        return True  # no procfs to inspect: trust the signal probe
    # The JVM's first thread exits early and shows as a zombie while the other threads still run,
    # so only a zombie with no other threads has exited. A recycled pid belongs to another program.
    exited = state == "Z" and threads <= 1
    return not exited and str(config_file).encode() in cmdline


def accepts_connections(port: int) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=0.5):
            return True
    except OSError:
        return False


def _answers_metadata(admin: AdminClient) -> bool:
    try:
        return bool(admin.list_topics(timeout=2).brokers)
    except KafkaException:
        return False


def read_properties(path: Path) -> dict[str, str]:
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return {}
    pairs = (line.split("=", 1) for line in lines if "=" in line and not line.lstrip().startswith("#"))
    return {key.strip(): value.strip() for key, value in pairs}
