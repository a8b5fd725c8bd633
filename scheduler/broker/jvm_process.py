"""What the JVM services the project runs itself (the dev broker, the Connect worker) have in common:
a Java new enough for Kafka, and one background JVM per data dir that holds the properties file it
runs with, its pid file and its logs, so a later CLI call finds, checks and stops it."""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar

KAFKA_VERSION = "4.2.0"
MIN_JAVA_MAJOR = 17
LOGS_DIR = "logs"
LOG4J = "log4j2.xml"
STOP_TIMEOUT_S = 30.0
KILL_WAIT_S = 10.0


class LocalProcessError(Exception):
    """Bad input, a missing tool or a process that would not start; the message says what to do."""


def java_executable(error: type[Exception] = LocalProcessError) -> str:
    """The `java` on PATH, checked to be new enough for Kafka 4 before anything is downloaded."""
    java = shutil.which("java")
    if java is None:
        raise error(f"`java` was not found on PATH: install a Java runtime {MIN_JAVA_MAJOR} or newer "
                    "(e.g. `apt-get install openjdk-17-jre-headless`) and put its bin directory on PATH")
    major = _java_major_version(java, error)
    if major < MIN_JAVA_MAJOR:
        raise error(
            f"{java} is Java {major}; Kafka {KAFKA_VERSION} needs Java {MIN_JAVA_MAJOR} or newer: "
            f"install it (e.g. `apt-get install openjdk-17-jre-headless`) and put it first on PATH"
        )
    return java


def _java_major_version(java: str, error: type[Exception]) -> int:
    result = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60)
    match = re.search(r'version "(\d+)(?:\.(\d+))?', result.stderr + result.stdout)
    if match is None:
        raise error(f"could not tell which Java {java} is: {(result.stderr or result.stdout).strip()}")
    major, minor = int(match.group(1)), int(match.group(2) or 0)
    return minor if major == 1 else major  # "1.8.0" is Java 8


class LocalJvm:
    """One JVM whose properties file, pid file and logs live in `data_dir`.

    Subclasses name their files, main class and heap, write their settings with `_write_properties`
    and say when the service is ready (`_wait_ready`); the lifecycle around the process is here."""

    error: ClassVar[type[LocalProcessError]] = LocalProcessError
    command: ClassVar[str]  # the CLI that starts it, named in the properties file's header
    properties_name: ClassVar[str]
    pid_name: ClassVar[str]
    log_name: ClassVar[str]  # the service's own log, beside the console output in logs/
    main_class: ClassVar[str]
    jvm_opts: ClassVar[tuple[str, ...]]

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = Path(data_dir).resolve()
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def log_file(self) -> Path:
        return self.data_dir / LOGS_DIR / self.log_name

    @property
    def console_file(self) -> Path:
        return self.data_dir / LOGS_DIR / "console.log"

    @property
    def _pid_file(self) -> Path:
        return self.data_dir / self.pid_name

    @property
    def _properties_file(self) -> Path:
        return self.data_dir / self.properties_name

    def pid(self) -> int | None:
        """The pid of this data dir's running JVM, or None (a stale pid file does not count)."""
        pid = read_pid_file(self._pid_file)
        return pid if pid is not None and self._alive(pid) else None

    def is_running(self) -> bool:
        return self.pid() is not None

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> bool:
        """SIGTERM for a controlled shutdown, SIGKILL if it takes longer than `timeout`.

        Returns whether one was running."""
        return self._signal(signal.SIGTERM, timeout)

    def kill(self) -> bool:
        """SIGKILL, as in a crash: no controlled shutdown, so the next start recovers."""
        return self._signal(signal.SIGKILL, KILL_WAIT_S)

    def _signal(self, sig: signal.Signals, timeout: float) -> bool:
        """Send `sig`, SIGKILL if the JVM outlives `timeout`; whether one was running."""
        pid = self.pid()
        if pid is None:
            self._forget()
            return False
        os.kill(pid, sig)
        if not self._wait_exit(pid, timeout):
            os.kill(pid, signal.SIGKILL)
            self._wait_exit(pid, KILL_WAIT_S)
        self._forget()
        return True

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
        if self._process is not None:
            self._process.poll()  # reaps a child that has exited
        self._process = None

    def _write_properties(self, log4j: bytes, settings: dict[str, str]) -> None:
        (self.data_dir / LOGS_DIR).mkdir(parents=True, exist_ok=True)
        (self.data_dir / LOG4J).write_bytes(log4j)
        text = "".join(f"{key}={value}\n" for key, value in settings.items())
        self._properties_file.write_text(f"# written by `{self.command} start`; edits are overwritten\n" + text)

    def _java_logging(self) -> list[str]:
        return [f"-Dlog4j2.configurationFile={self.data_dir / LOG4J}", f"-Dkafka.logs.dir={self.data_dir / LOGS_DIR}"]

    def _launch(self, java: str, libs: Path) -> None:
        command = [java, *self.jvm_opts, *self._java_logging(), "-cp", f"{libs}/*", self.main_class,
                   str(self._properties_file)]
        with open(self.console_file, "ab") as console:
            self._process = subprocess.Popen(
                command, cwd=self.data_dir, stdin=subprocess.DEVNULL, stdout=console, stderr=subprocess.STDOUT,
                start_new_session=True,  # survives the terminal or CLI process that started it
            )
        self._pid_file.write_text(f"{self._process.pid}\n")

    def _wait_ready(self, what: str, timeout: float, ready: Callable[[], bool], poll_s: float) -> None:
        """Until `ready()`; a JVM that exits meanwhile or does not get ready in time raises with its logs."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._process is not None and self._process.poll() is not None:
                code = self._process.returncode
                self._forget()
                raise self.error(f"the {what} exited during startup with code {code}; "
                                 f"last lines of {self.console_file} and {self.log_file}:\n{self._log_tail()}")
            if ready():
                return
            time.sleep(poll_s)
        self.kill()
        raise self.error(f"the {what} did not answer within {timeout:.0f}s and was killed; "
                         f"see {self.console_file} and {self.log_file}:\n{self._log_tail()}")

    def _log_tail(self, lines: int = 15) -> str:
        return log_tail((self.console_file, self.log_file), lines)


def read_pid_file(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (FileNotFoundError, ValueError, IndexError):
        return None


def read_properties(path: Path) -> dict[str, str]:
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return {}
    pairs = (line.split("=", 1) for line in lines if "=" in line and not line.lstrip().startswith("#"))
    return {key.strip(): value.strip() for key, value in pairs}


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
