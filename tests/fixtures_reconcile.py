"""One throw-away PostgreSQL server per pytest session, for the audit ledger's reconcile tests.

`AUDIT_DATABASE_URL` names an existing server instead. Otherwise Debian's server binaries are
started as the `postgres` user (initdb refuses root) on a Unix socket in a temporary directory.
"""
from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


def _server_binaries() -> Path | None:
    for candidate in [shutil.which("pg_ctl"), *sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"))]:
        if candidate and Path(candidate).exists() and (Path(candidate).resolve().parent / "initdb").exists():
            return Path(candidate).resolve().parent
    return None


@pytest.fixture(scope="session")
def audit_database_url() -> Iterator[str]:
    external = os.environ.get("AUDIT_DATABASE_URL")
    if external:
        yield external
        return
    binaries = _server_binaries()
    if binaries is None:
        pytest.skip("no PostgreSQL server binaries (pg_ctl, initdb): `make system-deps` installs them")
    run_as: list[str] = []
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            pytest.skip("running as root and there is no 'postgres' user to run the server as")
        run_as = ["runuser", "-u", "postgres", "--"]
    data = Path(tempfile.mkdtemp(prefix="pg-audit-"))
    if run_as:
        shutil.chown(data, "postgres", "postgres")
    from scheduler.broker.local import free_port

    port = free_port()
    subprocess.run([*run_as, str(binaries / "initdb"), "-D", str(data / "db"), "-U", "postgres", "--auth=trust",
                    "--no-sync"], check=True, capture_output=True)
    subprocess.run([*run_as, str(binaries / "pg_ctl"), "-D", str(data / "db"), "-w", "-l", str(data / "log"),
                    "-o", f"-p {port} -k {data} -c listen_addresses='' -c fsync=off", "start"],
                   check=True, capture_output=True)
    try:
        yield f"postgresql://postgres@/postgres?host={data}&port={port}"
    finally:
        subprocess.run([*run_as, str(binaries / "pg_ctl"), "-D", str(data / "db"), "-m", "immediate", "stop"],
                       capture_output=True)
        shutil.rmtree(data, ignore_errors=True)
