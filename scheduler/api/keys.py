"""API keys: each bound to one tenant or to the admin role, stored hashed in a JSON file
(one server; several servers share keys through a compacted topic, scheduler.api.shared_keys).

A key reads `sk_<key id>_<secret>`; the file keeps the key id, the role and
sha256(secret). The secret is 32 random bytes, so a fast hash is enough (a slow
one like scrypt protects guessable passwords, and would cost every request
tens of milliseconds); comparisons are constant-time. The file is written
atomically with mode 0600 and re-read when its modification time changes, so
keys created by `scheduler api keys create` apply to a running server.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from scheduler.config import state_home

KEY_PREFIX = "sk_"


def default_key_file() -> Path:
    return Path(os.environ.get("SCHEDULER_API_KEYS", str(state_home() / "api-keys.json")))


@dataclass(frozen=True)
class Principal:
    """Who is calling: a tenant's key (tenant set) or an admin key (tenant None)."""

    key_id: str
    tenant: str | None

    @property
    def admin(self) -> bool:
        return self.tenant is None

    def may_access(self, tenant: str) -> bool:
        return self.admin or self.tenant == tenant


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def new_key() -> tuple[str, str, str]:
    """(key id, secret, the key as presented): `sk_<key id>_<secret>`."""
    key_id = secrets.token_hex(6)
    secret = secrets.token_urlsafe(32)
    return key_id, secret, f"{KEY_PREFIX}{key_id}_{secret}"


def check_key(presented: str, lookup: Callable[[str], Mapping[str, Any] | None]) -> Principal | None:
    """The principal of `presented` if `lookup(key id)` finds an entry whose sha256 matches, else None."""
    if not presented.startswith(KEY_PREFIX):
        return None
    key_id, sep, secret = presented[len(KEY_PREFIX):].partition("_")
    entry = lookup(key_id) if sep else None
    if entry is None:
        return None
    if not hmac.compare_digest(_digest(secret), str(entry["sha256"])):
        return None
    return Principal(key_id, entry["tenant"])


class Keys(Protocol):
    """What the HTTP API needs of a key store: the file (KeyStore) or the shared topic (shared_keys)."""

    def verify(self, presented: str) -> Principal | None: ...


def create_key(path: Path, tenant: str | None) -> str:
    """Add a key for `tenant` (None: admin) to the file and return it; only its hash is stored."""
    key_id, secret, key = new_key()
    entries = _read(path)
    entries[key_id] = {"tenant": tenant, "sha256": _digest(secret)}
    _write(path, entries)
    return key


def list_keys(path: Path) -> list[dict[str, str | bool | None]]:
    """Ids and tenants of the file's keys (never their hashes)."""
    return [{"key_id": key_id, "tenant": entry["tenant"], "admin": entry["tenant"] is None}
            for key_id, entry in sorted(_read(path).items())]


def revoke_key(path: Path, key_id: str) -> bool:
    entries = _read(path)
    if entries.pop(key_id, None) is None:
        return False
    _write(path, entries)
    return True


def _read(path: Path) -> dict[str, dict[str, str | None]]:
    if not path.exists():
        return {}
    return dict(json.loads(path.read_text())["keys"])


def _write(path: Path, entries: dict[str, dict[str, str | None]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump({"keys": entries}, out, indent=2, sort_keys=True)
    os.replace(tmp, path)


class KeyStore:
    """Verifies presented keys against the key file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._mtime: float | None = None
        self._entries: dict[str, dict[str, str | None]] = {}

    def _current(self) -> dict[str, dict[str, str | None]]:
        try:
            mtime = self.path.stat().st_mtime
        except FileNotFoundError:
            return {}
        with self._lock:
            if mtime != self._mtime:
                self._entries = _read(self.path)
                self._mtime = mtime
            return self._entries

    def verify(self, presented: str) -> Principal | None:
        """The key's principal, or None for anything that is not a valid key."""
        return check_key(presented, self._current().get)
