"""The local broker's TLS material, made with Java's keytool when the broker first starts with a SASL_SSL port.

A self-signed certificate for 127.0.0.1/localhost in a PKCS12 keystore (the broker's), and the same
certificate in PEM (the clients' `ssl.ca.location`): clients verify the broker as they would in
production, against a CA file, only the CA is the certificate itself. Kept in the data dir, so
clients' CA file stays valid across restarts; `--wipe` makes a new one.
"""
from __future__ import annotations

import secrets
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

TLS_DIR = "tls"
ALIAS = "broker"
VALIDITY_DAYS = 365


@dataclass(frozen=True)
class TlsFiles:
    keystore: Path
    password: str
    ca_file: Path


def tls_files(data_dir: Path) -> TlsFiles:
    directory = data_dir / TLS_DIR
    password_file = directory / "keystore.password"
    password = password_file.read_text().strip() if password_file.exists() else ""
    return TlsFiles(directory / "broker.p12", password, directory / "ca.pem")


def keytool_for(java: str) -> str:
    """The keytool beside the java that runs the broker, else the one on PATH."""
    beside = Path(java).resolve().parent / "keytool"
    found = str(beside) if beside.exists() else shutil.which("keytool")
    if found is None:
        raise RuntimeError("keytool not found: it comes with the JDK/JRE (Debian: openjdk-17-jre-headless)")
    return found


def ensure_tls_files(data_dir: Path, java: str) -> TlsFiles:
    existing = tls_files(data_dir)
    if existing.keystore.exists() and existing.ca_file.exists() and existing.password:
        return existing
    directory = existing.keystore.parent
    directory.mkdir(parents=True, exist_ok=True)
    password = secrets.token_urlsafe(18)
    password_file = directory / "keystore.password"
    password_file.unlink(missing_ok=True)
    password_file.touch(mode=0o600)
    password_file.write_text(password + "\n")
    existing.keystore.unlink(missing_ok=True)
    keytool = keytool_for(java)
    _run([keytool, "-genkeypair", "-alias", ALIAS, "-keyalg", "RSA", "-keysize", "2048",
          "-validity", str(VALIDITY_DAYS), "-dname", "CN=localhost", "-ext", "SAN=IP:127.0.0.1,DNS:localhost",
          "-keystore", str(existing.keystore), "-storetype", "PKCS12", "-storepass", password, "-keypass", password])
    _run([keytool, "-exportcert", "-rfc", "-alias", ALIAS, "-keystore", str(existing.keystore),
          "-storetype", "PKCS12", "-storepass", password, "-file", str(existing.ca_file)])
    return tls_files(data_dir)


def _run(command: list[str]) -> None:
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"{Path(command[0]).name} {command[1]} failed: {(result.stdout + result.stderr).strip()}")
