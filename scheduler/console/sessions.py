"""Console log-in: an API key typed once into a form becomes a server-side session.

The browser holds only a random session token in an HttpOnly, SameSite=Strict cookie (scripts
cannot read it, other sites cannot send it); the key stays on the server and is checked against
the key store on every request, so a revoked key ends its sessions at once. Every form carries
the session's CSRF token. Sessions live in this process's memory: a restart logs everyone out.
"""
from __future__ import annotations

import hmac
import secrets
import threading
import time
from dataclasses import dataclass

from scheduler.api.keys import Keys, Principal

COOKIE = "scheduler_console"
TTL_S = 8 * 3600.0
MAX_SESSIONS = 10_000


@dataclass(frozen=True)
class Session:
    token: str
    key: str
    csrf: str
    expires_at: float


class Sessions:
    def __init__(self, keys: Keys, ttl_s: float = TTL_S) -> None:
        self.keys = keys
        self.ttl_s = ttl_s
        self._lock = threading.Lock()
        self._sessions: dict[str, Session] = {}

    def login(self, key: str, now: float | None = None) -> Session | None:
        """A new session for a valid key; None for anything else."""
        if self.keys.verify(key.strip()) is None:
            return None
        now = time.time() if now is None else now
        session = Session(secrets.token_urlsafe(32), key.strip(), secrets.token_urlsafe(16), now + self.ttl_s)
        with self._lock:
            self._expire(now)
            if len(self._sessions) >= MAX_SESSIONS:  # the oldest go first
                oldest = sorted(self._sessions, key=lambda t: self._sessions[t].expires_at)
                for token in oldest[:len(oldest) // 10]:
                    del self._sessions[token]
            self._sessions[session.token] = session
        return session

    def _expire(self, now: float) -> None:
        for token in [t for t, s in self._sessions.items() if s.expires_at <= now]:
            del self._sessions[token]

    def find(self, token: str | None, now: float | None = None) -> tuple[Session, Principal] | None:
        """The session and who it acts for, while both the session and its key are valid."""
        if not token:
            return None
        now = time.time() if now is None else now
        with self._lock:
            session = self._sessions.get(token)
        if session is None or session.expires_at <= now:
            return None
        principal = self.keys.verify(session.key)
        return None if principal is None else (session, principal)

    def logout(self, token: str | None) -> None:
        with self._lock:
            self._sessions.pop(token or "", None)


def csrf_ok(session: Session, presented: str | None) -> bool:
    return presented is not None and hmac.compare_digest(session.csrf, presented)
