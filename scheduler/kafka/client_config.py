"""`--client-config FILE` and `SCHEDULER_CLIENT_CONFIG`: the librdkafka settings (security.protocol, sasl.*,
ssl.ca.location, ...) every command that talks to Kafka adds to its clients, so each can reach a cluster that
only listens for SASL_SSL. The flag wins over the variable; neither means a plaintext connection."""
from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from pathlib import Path

CLIENT_CONFIG_ENV = "SCHEDULER_CLIENT_CONFIG"


def add_client_config(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--client-config", type=Path, metavar="FILE", default=None,
                        help="librdkafka settings (key=value lines) for the command's Kafka clients, e.g. "
                             f"security.protocol=SASL_SSL, sasl.* and ssl.ca.location (default ${CLIENT_CONFIG_ENV})")


def read_client_config(path: Path) -> dict[str, str]:
    """`key=value` lines, as in a Java client's properties file; blank lines and `#` comments are skipped."""
    settings = {}
    for number, line in enumerate(path.read_text().splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"{path}:{number}: expected key=value, got {line!r}")
        settings[key.strip()] = value.strip()
    return settings


def client_config_path(flag: Path | None, environ: Mapping[str, str] | None = None) -> Path | None:
    """The file to read: the flag's, else the environment's, else None."""
    if flag is not None:
        return flag
    text = (os.environ if environ is None else environ).get(CLIENT_CONFIG_ENV, "").strip()
    return Path(text) if text else None


def client_config_of(args: argparse.Namespace) -> dict[str, str]:
    """The settings of a command's --client-config (or the environment's file); {} when neither is given.
    Raises ValueError or OSError on a malformed or unreadable file: the caller reports it as a usage error."""
    path = client_config_path(getattr(args, "client_config", None))
    return read_client_config(path) if path is not None else {}
