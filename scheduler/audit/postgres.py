"""A throw-away PostgreSQL server started from Debian's server binaries (initdb + pg_ctl), for the
audit ledger in development, tests and benches; `AUDIT_DATABASE_URL` names an existing one instead.

Started as the `postgres` user when we are root (initdb refuses root), trust authentication on
127.0.0.1 only, no fsync: it holds nothing that outlives the session that started it."""
from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

from scheduler import config
from scheduler.audit.tables import DATABASE_URL_ENV
from scheduler.broker.ports import HOST, check_port_free, free_port

SUPERUSER = "postgres"
_PORT_FILE = "port"
DATABASE = "postgres"


class PostgresError(Exception):
    """No server binaries, or a server that would not start; the message says what to do."""


def server_binaries() -> Path:
    """The directory holding pg_ctl and initdb: on PATH, else Debian's /usr/lib/postgresql/<N>/bin."""
    for candidate in [shutil.which("pg_ctl"), *sorted(map(str, Path("/usr/lib/postgresql").glob("*/bin/pg_ctl")))]:
        if candidate and Path(candidate).exists() and (Path(candidate).resolve().parent / "initdb").exists():
            return Path(candidate).resolve().parent
    raise PostgresError("no PostgreSQL server binaries (pg_ctl, initdb): install Debian's `postgresql` package "
                        "(`make system-deps`), or set AUDIT_DATABASE_URL to an existing server")


def _run_as() -> list[str]:
    if os.geteuid() != 0:
        return []
    try:
        pwd.getpwnam(SUPERUSER)
    except KeyError:
        raise PostgresError(f"running as root and there is no '{SUPERUSER}' user to run the server as "
                            "(Debian's postgresql package creates it)") from None
    return ["runuser", "-u", SUPERUSER, "--"]


def default_data_dir() -> Path:
    """As root the server runs as `postgres`, who cannot enter root's home: then it lives in /var/tmp."""
    if os.geteuid() == 0:
        return Path("/var/tmp/kafka-job-scheduler/postgres")
    return config.state_home() / "postgres"


def _remembered_port(data_dir: Path) -> int | None:
    try:
        return int((data_dir / _PORT_FILE).read_text())
    except (FileNotFoundError, ValueError):
        return None


def database_url() -> str:
    """The ledger's database: AUDIT_DATABASE_URL, else the local server from `scheduler audit postgres start`."""
    url = os.environ.get(DATABASE_URL_ENV)
    if url:
        return url
    local = LocalPostgres(default_data_dir())
    if not local.is_running():
        raise PostgresError(f"{DATABASE_URL_ENV} is not set and no local PostgreSQL runs: "
                            "start one with `scheduler audit postgres start`")
    return local.url


class LocalPostgres:
    """One server whose cluster, socket and log live in `data_dir` (created if missing)."""

    def __init__(self, data_dir: Path | None = None, port: int | None = None) -> None:
        self.data_dir = Path(data_dir or tempfile.mkdtemp(prefix="kjs-pg-")).resolve()
        self.port = port or _remembered_port(self.data_dir) or free_port()
        self._binaries = server_binaries()
        self._run_as = _run_as()

    def is_running(self) -> bool:
        return (self._cluster / "postmaster.pid").exists() and subprocess.run(
            [*self._run_as, str(self._binaries / "pg_ctl"), "-D", str(self._cluster), "status"],
            capture_output=True).returncode == 0

    @property
    def url(self) -> str:
        """A libpq URL (what AUDIT_DATABASE_URL holds)."""
        return f"postgresql://{SUPERUSER}@{HOST}:{self.port}/{DATABASE}"

    @property
    def log_file(self) -> Path:
        return self.data_dir / "postgres.log"

    @property
    def _cluster(self) -> Path:
        return self.data_dir / "db"

    def start(self) -> str:
        """initdb on first use, then start and wait until it accepts connections; returns `url`."""
        if self.is_running():
            return self.url
        check_port_free(self.port, "--port", PostgresError)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if self._run_as:
            shutil.chown(self.data_dir, SUPERUSER, SUPERUSER)
        (self.data_dir / _PORT_FILE).write_text(f"{self.port}\n")
        if not (self._cluster / "PG_VERSION").exists():
            self._pg("initdb", "-D", str(self._cluster), "-U", SUPERUSER, "--auth=trust", "--no-sync",
                     "--encoding=UTF8", "--locale=C")
        self._pg("pg_ctl", "-D", str(self._cluster), "-w", "-t", "60", "-l", str(self.log_file), "-o",
                 f"-p {self.port} -k {self.data_dir} -c listen_addresses={HOST} -c fsync=off "
                 f"-c synchronous_commit=off -c full_page_writes=off -c max_connections=200 -c timezone=UTC", "start")
        return self.url

    def stop(self, mode: str = "fast") -> None:
        """`fast` rolls back open transactions; `immediate` is a crash (recovery on next start)."""
        if (self._cluster / "postmaster.pid").exists():
            subprocess.run([*self._run_as, str(self._binaries / "pg_ctl"), "-D", str(self._cluster), "-m", mode,
                            "-w", "stop"], capture_output=True)

    def destroy(self) -> None:
        self.stop("immediate")
        shutil.rmtree(self.data_dir, ignore_errors=True)

    def _pg(self, tool: str, *arguments: str) -> None:
        result = subprocess.run([*self._run_as, str(self._binaries / tool), *arguments], capture_output=True,
                                text=True)
        if result.returncode != 0:
            log = self.log_file.read_text(errors="replace")[-2000:] if self.log_file.exists() else ""
            raise PostgresError(f"{tool} failed with code {result.returncode}:\n{result.stdout}{result.stderr}{log}")
